"""Our GPT-2 against transformers' GPT-2, and the cached generation path against the full forward pass."""

import pytest
import torch
from cache_checks import assert_prefill_cache_holds_what_the_last_prompt_token_sees
from transformers import GPT2LMHeadModel

from bab.context.gpt2 import GPT2LM, GPT2Config, from_hf_model, load_hf_state_dict
from bab.context.interaction import PruningConfig

SMALL = dict(vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=4)


def tiny(pruning=None, **overrides):
    torch.manual_seed(0)
    return GPT2LM(GPT2Config(**{**SMALL, **overrides}, pruning=pruning)).eval()


def dropping_model(bias=2.0, seed=0, **overrides):
    """Random interaction weights big enough that tokens really get dropped at alpha = inf."""
    torch.manual_seed(seed)
    model = GPT2LM(GPT2Config(**{**SMALL, **overrides}, pruning=PruningConfig(r=8, init_std=0.5, init_bias=bias)))
    return model.eval()


def greedy_with_cache(model, prompt, steps, prune=True):
    """(per-step logits [B, steps + 1, V], the final sequence, live positions per step per layer)."""
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + steps, prune=prune)
    logits = [model.prefill(prompt, cache, prune=prune)]
    seq, positions, sizes = prompt, [], []
    for _ in range(steps):
        nxt = logits[-1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        logits.append(model.decode_step(nxt, cache, prune=prune))
        positions.append([[set(row[valid].tolist()) for row, valid in zip(layer.positions[:, :layer.length],
                                                                              layer.valid[:, :layer.length],
                                                                              strict=True)]
                          for layer in cache.layers])
        sizes.append([layer.keys.shape[2] for layer in cache.layers])
    return torch.stack(logits, dim=1), seq, positions, sizes, cache


def test_logits_equal_transformers_gpt2_with_pruning_off():
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**SMALL).to_hf()).eval()
    ours = from_hf_model(hf, pruning=PruningConfig(r=8)).eval()
    ids = torch.randint(0, SMALL["vocab_size"], (3, 40))
    with torch.no_grad():
        expected = hf(ids).logits
        assert torch.allclose(ours(ids, prune=False).logits, expected, atol=1e-5)
        # and a plain GPT-2 (no interaction modules at all) loads the same weights
        plain = load_hf_state_dict(GPT2LM(GPT2Config(**SMALL)), hf.state_dict()).eval()
        assert torch.allclose(plain(ids).logits, expected, atol=1e-5)


def test_pruning_that_keeps_everything_equals_dense():
    model = tiny(PruningConfig(r=8, init_bias=50.0))
    ids = torch.randint(0, 101, (2, 30))
    with torch.no_grad():
        out = model(ids)
        assert out.keep_mass.item() == 1.0
        assert torch.allclose(out.logits, model(ids, prune=False).logits, atol=1e-6)


def test_hf_state_dict_with_wrong_shape_is_refused():
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**SMALL).to_hf())
    with pytest.raises(ValueError, match="does not fit|size mismatch"):
        try:
            load_hf_state_dict(GPT2LM(GPT2Config(**{**SMALL, "n_layer": 3})), hf.state_dict())
        except RuntimeError as exc:  # torch reports shape mismatches as RuntimeError
            raise ValueError(str(exc)) from exc


def test_context_longer_than_max_positions_raises():
    model = tiny()
    with pytest.raises(ValueError, match="longer than the model's maximum context"):
        model(torch.zeros(1, SMALL["n_positions"] + 1, dtype=torch.long))
    cache = model.new_cache(1, 8, prune=False)
    model.prefill(torch.zeros(1, SMALL["n_positions"], dtype=torch.long), cache)
    with pytest.raises(ValueError, match="longer than the model's maximum context"):
        model.decode_step(torch.zeros(1, 1, dtype=torch.long), cache)


def test_unsupported_gpt2_options_raise():
    with pytest.raises(ValueError, match="divisible"):
        GPT2Config(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="activation_function"):
        GPT2Config(activation_function="swish")


@pytest.mark.parametrize("bias", [50.0, 2.0, 0.5])
def test_cached_generation_equals_full_forward(bias):
    model = dropping_model(bias=bias)
    prompt = torch.randint(0, 101, (3, 20))
    step_logits, seq, _, _, _ = greedy_with_cache(model, prompt, steps=20)
    with torch.no_grad():
        full = model(seq).logits[:, prompt.shape[1] - 1:]  # the logits that predicted each generated token
    assert torch.allclose(step_logits, full, atol=1e-5)


def test_dense_cache_equals_full_forward_and_never_shrinks():
    model = dropping_model(bias=0.5)
    prompt = torch.randint(0, 101, (2, 16))
    step_logits, seq, _, sizes, cache = greedy_with_cache(model, prompt, steps=10, prune=False)
    with torch.no_grad():
        full = model(seq, prune=False).logits[:, 15:]
    assert torch.allclose(step_logits, full, atol=1e-5)
    assert all(size == [26, 26] for size in sizes)  # preallocated once: prompt + steps
    assert cache.live_tokens().eq(26).all()


def test_dropped_tokens_never_reappear_and_the_cache_shrinks():
    model = dropping_model(bias=1.0)
    prompt = torch.randint(0, 101, (3, 24))
    _, seq, positions, sizes, cache = greedy_with_cache(model, prompt, steps=24)
    for t in range(1, len(positions)):
        new = prompt.shape[1] + t  # the position of the token appended at step t
        for layer in range(len(positions[t])):
            for row in range(3):
                assert positions[t][layer][row] <= positions[t - 1][layer][row] | {new}
    # the buffers themselves are smaller than the dense cache, not just masked
    dense = model.new_cache(3, seq.shape[1], prune=False)
    model.prefill(seq, dense, prune=False)
    assert max(sizes[-1]) < seq.shape[1]
    live = cache.live_tokens()
    assert (live < seq.shape[1]).all() and (live >= 1).all()
    assert all(layer.keys.shape[2] < seq.shape[1] for layer in cache.layers)
    kv_bytes = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    dense_bytes = sum(layer.keys.numel() + layer.values.numel() for layer in dense.layers)
    assert kv_bytes < dense_bytes


def test_cache_keeps_exactly_what_the_full_forward_keeps():
    """After the prompt, the live tokens of each layer are those the last query still sees (hard I > 0)."""
    model = dropping_model(bias=1.0, seed=3)
    assert_prefill_cache_holds_what_the_last_prompt_token_sees(model, torch.randint(0, 101, (2, 30)))


def test_reversible_ablation_cannot_drop_from_the_cache():
    model = tiny(PruningConfig(r=8, irreversible=False))
    with pytest.raises(ValueError, match="irreversible"):
        model.token_drop_times(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="irreversible"):
        model.new_cache(1, 8, prune=True)
    model.new_cache(1, 8, prune=False)  # the dense cache still works


def test_run_cache_round_trip_and_untied_head_refused(tmp_path):
    from bab.core.runs import RunCache

    model = dropping_model(bias=1.0)
    cache = RunCache(tmp_path)
    cache.save("gpt2", {"k": 1}, model, {"ok": True})
    fresh = GPT2LM(model.config).eval()
    assert cache.load("gpt2", {"k": 1}, fresh) == {"ok": True}
    ids = torch.randint(0, 101, (2, 20))
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**SMALL).to_hf())
    state = dict(hf.state_dict())
    state["lm_head.weight"] = torch.randn_like(state["lm_head.weight"])
    with pytest.raises(ValueError, match="tied"):
        load_hf_state_dict(GPT2LM(GPT2Config(**SMALL)), state)
