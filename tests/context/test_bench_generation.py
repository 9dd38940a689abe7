"""The generation benchmark and its structural checks, on tiny random models (timings are not asserted)."""

import pytest
import tiny_decoders
import torch

from bab.context.attach import set_alpha, set_pruning
from bab.context.bench import cache_verdicts, generate_once, generation_table
from bab.context.interaction import HARD, PruningConfig
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers


def model_with(bias):
    torch.manual_seed(0)
    return tiny_decoders.tiny_gpt2(PruningConfig(r=8, init_std=0.5, init_bias=bias), vocab_size=64, n_positions=96,
                                   n_embd=32)


@torch.no_grad()
def greedy_without_cache(model, prompt, new_tokens, prune):
    """The written-out reference: each next token the argmax of transformers' own full forward of the sequence so far
    (no cache; pruning on or off, hard decisions)."""
    set_alpha(model, HARD)
    set_pruning(model, prune)
    try:
        seq = prompt
        for _ in range(new_tokens):
            seq = torch.cat([seq, model(seq, use_cache=False).logits[:, -1:].argmax(-1)], dim=1)
    finally:
        set_pruning(model, True)
    return seq[:, prompt.shape[1]:]


def test_cache_verdicts_hold_for_a_pruning_model():
    prompt = torch.randint(0, 64, (3, 40))
    verdicts = cache_verdicts(model_with(1.0), prompt, new_tokens=12)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"] and verdicts["cache_shrinks"]
    assert 0 < verdicts["live_fraction"] < 1
    keep_all = cache_verdicts(model_with(50.0), prompt, new_tokens=4)
    assert keep_all["equals_full_forward"] and not keep_all["cache_shrinks"] and keep_all["live_fraction"] == 1.0


@pytest.mark.parametrize("prune", [True, False])
def test_generated_tokens_are_the_greedy_tokens_of_the_full_forward(prune):
    """generate_once (model.generate with a PrunedCache, or a DynamicCache for dense) against a greedy loop without
    any cache; the cache was given T + new_tokens - 1 tokens and, pruned, holds fewer."""
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(5))
    prefill_s, decode_s, peak, cache, tokens, live_after_prompt = generate_once(model, prompt, 12, prune=prune)
    assert tokens.shape == (3, 12)
    assert torch.equal(tokens, greedy_without_cache(model, prompt, 12, prune))
    assert isinstance(cache, PrunedCache) == prune
    assert prefill_s > 0 and decode_s > 0 and peak > 0
    seen = 40 + 12 - 1
    for layer in cache.layers:
        assert (layer.keys.shape[2] < seen) if prune else (layer.keys.shape[2] == seen)
    assert (live_after_prompt < 2 * 3 * 40) if prune else (live_after_prompt == 2 * 3 * 40)


def test_generation_table_reports_ratios_against_dense():
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (2, 48))
    table = generation_table({"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})}, prompt,
                             new_tokens=8, warmup=0, repeats=2)
    assert list(table.index) == ["dense", "pruned"]
    assert table.loc["dense", "throughput_ratio"] == 1.0 and table.loc["dense", "memory_ratio"] == 1.0
    assert table.loc["dense", "end_to_end_ratio"] == 1.0
    total = table.prefill_ms + table.decode_ms
    assert table.loc["pruned", "end_to_end_ratio"] == total["dense"] / total["pruned"]
    assert table.loc["pruned", "cache_mb_end"] < table.loc["dense", "cache_mb_end"]
    assert table.loc["pruned", "live_fraction"] < 1.0 == table.loc["dense", "live_fraction"]
    assert (table.tokens_per_s > 0).all()
    # throughput counts the new_tokens - 1 steps after the prompt pass, for every row
    assert table.loc["pruned", "tokens_per_s"] == pytest.approx(2 * (8 - 1) / (table.loc["pruned", "decode_ms"] / 1e3))
    # the analytic limit, by hand: weights + keys and values of every live token (dense: 48 after the prompt,
    # 55 at the end: the last generated token is never fed back) in 2 layers x 2 rows x 2 heads x 16 dims, float32
    weights = 4 * sum(p.numel() for p in model.parameters())  # the output projection is tied to the embedding
    dense_read = weights + 4 * (2 * 2 * 16) * 2 * 2 * (48 + 55) / 2
    assert table.loc["dense", "read_mb_per_step"] * 2**20 == pytest.approx(dense_read)
    assert table.loc["dense", "decode_limit"] == 1.0
    assert table.loc["pruned", "decode_limit"] == pytest.approx(dense_read / (table.loc["pruned", "read_mb_per_step"]
                                                                              * 2**20))
    per_layer = table.attrs["live_by_layer"]
    assert per_layer["dense"] == [1.0, 1.0] and len(per_layer["pruned"]) == 2
    assert abs(sum(per_layer["pruned"]) / 2 - table.loc["pruned", "live_fraction"]) < 1e-6
    with pytest.raises(ValueError, match="baseline"):
        generation_table({"pruned": (model, {"prune": True})}, prompt, 2)


def test_generation_table_keeps_the_paired_decode_repeats_behind_each_throughput_ratio():
    import numpy as np

    from bab.context.bench import repeat_times

    model = model_with(1.0)
    prompt = torch.randint(0, 64, (2, 24))
    table = generation_table({"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})}, prompt,
                             new_tokens=4, warmup=0, repeats=3)
    series = repeat_times(table, "pruned")
    assert len(series["dense_ms"]) == len(series["ms"]) == 3
    assert np.median(series["ms"]) == pytest.approx(table.loc["pruned", "decode_ms"], rel=1e-12)
    assert np.median(series["dense_ms"]) / np.median(series["ms"]) == pytest.approx(
        table.loc["pruned", "throughput_ratio"], rel=1e-12)


def test_generation_longer_than_the_context_raises():
    with pytest.raises(ValueError, match="longer than the model's maximum context"):
        generate_once(model_with(1.0), torch.zeros(1, 90, dtype=torch.long), new_tokens=10)


def test_batched_rows_hold_their_own_live_tokens_padded_to_the_longest_row_only():
    """Rows drop different tokens; each layer's buffers are as long as its longest row's live tokens, no longer, and
    the generated logits still equal the full forward."""
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(6))
    verdicts = cache_verdicts(model, prompt, new_tokens=12)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"]
    _, _, _, cache, _, _ = generate_once(model, prompt, 12)
    rows_differ = False
    for layer in cache.layers:
        live = layer.live_tokens()  # [B]
        assert layer.keys.shape[2] == layer.values.shape[2] == int(live.max())
        assert torch.equal(live, layer.valid.sum(dim=1)) and torch.equal(live, (layer.positions >= 0).sum(dim=1))
        rows_differ |= len(set(live.tolist())) > 1
    assert rows_differ  # not vacuous: some rows are padded
