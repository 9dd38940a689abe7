"""The generation benchmark and its structural checks, on tiny random models (timings are not asserted)."""

import pytest
import torch

from bab.context.bench import cache_verdicts, generate_once, generation_table
from bab.context.gpt2 import GPT2LM, GPT2Config
from bab.context.interaction import PruningConfig


def model_with(bias):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=96, n_embd=32, n_layer=2, n_head=2,
                        pruning=PruningConfig(r=8, init_std=0.5, init_bias=bias))
    return GPT2LM(config).eval()


def test_cache_verdicts_hold_for_a_pruning_model():
    prompt = torch.randint(0, 64, (3, 40))
    verdicts = cache_verdicts(model_with(1.0), prompt, new_tokens=12)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"] and verdicts["cache_shrinks"]
    assert 0 < verdicts["live_fraction"] < 1
    keep_all = cache_verdicts(model_with(50.0), prompt, new_tokens=4)
    assert keep_all["equals_full_forward"] and not keep_all["cache_shrinks"] and keep_all["live_fraction"] == 1.0


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
    # the analytic limit, by hand: weights + keys and values of every live token (dense: 48 after the prompt,
    # 56 at the end) in 2 layers x 2 rows x 2 heads x 16 dims, float32
    weights = 4 * sum(p.numel() for p in model.parameters())
    dense_read = weights + 4 * (2 * 2 * 16) * 2 * 2 * (48 + 56) / 2
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


def test_batched_compaction_is_equivalent_and_bounded():
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40))
    verdicts = cache_verdicts(model, prompt, new_tokens=12, compact_every=0.5)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"]
    _, _, _, cache, _, _ = generate_once(model, prompt, 12, compact_every=0.5)
    for layer in cache.layers:  # slots beyond the longest row's live tokens stay under half the used ones
        assert layer.length - int(layer.live_tokens().max()) <= 0.5 * layer.length + 1
    with pytest.raises(ValueError, match="compact_every"):
        model.new_cache(1, 4, prune=True, compact_every=1.0)
