"""ContextPruner on a tiny random Llama saved as a local folder: perplexity against transformers, fit, errors."""

import math
import random

import api_fixtures
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from bab.api.context import ContextPruner

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread

VOCAB = 40


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=64)
    hf = LlamaForCausalLM(config).eval()
    hf.save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder, hf


def text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randint(1, VOCAB - 1)}" for _ in range(n_words))


def test_dense_perplexity_is_the_transformers_models(tiny_llama):
    folder, hf = tiny_llama
    pruner = ContextPruner.from_pretrained(folder, r=4, context=16)
    held_out = text(200, seed=1)
    result = pruner.evaluate(held_out)
    ids = torch.tensor(pruner.tokenizer(held_out)["input_ids"])
    windows = (len(ids) - 1) // 16  # non-overlapping windows of 16 inputs + 1 target
    nll = 0.0
    with torch.no_grad():
        for w in range(windows):
            chunk = ids[w * 16: w * 16 + 17]
            nll += F.cross_entropy(hf(chunk[None, :-1]).logits[0], chunk[1:], reduction="sum").item()
    assert result["windows"] == windows
    assert result["dense_perplexity"] == pytest.approx(math.exp(nll / (16 * windows)), rel=1e-4)


def test_fit_with_a_large_gamma_prunes_context(tiny_llama):
    pruner = ContextPruner.from_pretrained(tiny_llama[0], r=4, context=16)
    before = pruner.evaluate(text(200, seed=2))["fraction_pruned"]
    pruner.fit(text(2000, seed=3), steps=60, gamma=5.0, lr=1e-3, pruning_lr=0.1, progress=False)
    after = pruner.evaluate(text(200, seed=2))
    assert pruner.history and after["fraction_pruned"] > before + 0.1


def test_bad_text_says_what_to_fix(tiny_llama, tmp_path):
    pruner = ContextPruner.from_pretrained(tiny_llama[0], r=4, context=16)
    with pytest.raises(FileNotFoundError, match="text file not found"):
        pruner.fit(str(tmp_path / "missing.txt"), steps=1)
    with pytest.raises(ValueError, match="too few for one window of 16"):
        pruner.fit("w1 w2 w3", steps=1)
    with pytest.raises(ValueError, match="the text is empty"):
        pruner.evaluate("   ")
    with pytest.raises(ValueError, match="budget"):
        pruner.evaluate(text(100, seed=4), budget=1.5)


def test_a_killed_fit_resumes_where_it_stopped(tiny_llama, tmp_path, monkeypatch, capsys):
    from bab.context.train import LMObjective

    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BAB_CHECKPOINT_SECONDS", "1e-9")  # a checkpoint after every step
    corpus = text(2000, seed=3)

    def pruner():
        torch.manual_seed(0)  # the fresh interaction modules
        return ContextPruner.from_pretrained(tiny_llama[0], r=4, context=16)

    reference = pruner().fit(corpus, steps=8, progress=False, cache=False)
    original = LMObjective.step

    def killed_at_step_5(self, model, teacher, batch, rng, step):
        if step == 5:
            raise KeyboardInterrupt
        return original(self, model, teacher, batch, rng, step)

    with monkeypatch.context() as patch:
        patch.setattr(LMObjective, "step", killed_at_step_5)
        with pytest.raises(KeyboardInterrupt):
            pruner().fit(corpus, steps=8, progress=False)
    resumed = pruner().fit(corpus, steps=8, progress=False)
    assert "resuming own_text-fit (context_pruning) at step 5/8" in capsys.readouterr().err
    assert resumed.history == reference.history
    for (name, a), b in zip(resumed.model.state_dict().items(), reference.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert not list((tmp_path / "partial").glob("*/checkpoint.pt"))  # cleared once finished
    # a repeated fit is served from the run cache, as the other methods' fits are
    with monkeypatch.context() as patch:
        patch.setattr(LMObjective, "step", killed_at_step_5)
        again = pruner().fit(corpus, steps=8, progress=False)
    assert again.history == reference.history
    for (name, a), b in zip(again.model.state_dict().items(), reference.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_transformers_model_object_prunes_and_generates_as_its_full_forward():
    """A Qwen2 model object the user already has: attached in place, fitted, and its generate() with the cache that
    drops tokens gives the tokens of the hard full forward recomputed at every step."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        use_sliding_window=False, bos_token_id=None, eos_token_id=None,
                                        pad_token_id=None))
    with pytest.raises(ValueError, match="needs its tokenizer"):
        ContextPruner.from_pretrained(qwen)
    pruner = ContextPruner.from_pretrained(qwen, tokenizer=word_tokenizer(), r=4, context=16)
    assert pruner.model is qwen
    pruner.fit(text(2000, seed=3), steps=30, gamma=5.0, lr=1e-3, pruning_lr=0.1, progress=False)
    assert pruner.evaluate(text(200, seed=2))["fraction_pruned"] > 0.1
    prompt = text(20, seed=5)
    continuation = pruner.generate(prompt, max_new_tokens=6)
    ids = torch.tensor([pruner.tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, qwen(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert continuation.split() == pruner.tokenizer.decode(ids[0, -6:]).split()
