"""The generation benchmark and its structural checks, on tiny random models (timings are not asserted)."""

import pytest
import tiny_decoders
import torch

from bab.context.attach import set_alpha, set_pruning
from bab.context.bench import DYNAMIC, cache_verdicts, generate_once, generation_table, speedup_intervals
from bab.context.interaction import HARD, PruningConfig
from bab.context.pruned_cache import PrunedCache, PrunedLayer

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
    for layer in cache.layers:  # pruned: every row holds fewer live tokens than it was given
        assert (int(layer.live_tokens().max()) < seen) if prune else (layer.keys.shape[2] == seen)
    assert (live_after_prompt < 2 * 3 * 40) if prune else (live_after_prompt == 2 * 3 * 40)


def test_generation_table_reports_ratios_against_dense():
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (2, 48))
    table = generation_table({"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})}, prompt,
                             new_tokens=8, warmup=0, repeats=2)
    assert list(table.index) == ["dense", DYNAMIC, "pruned"]
    assert table.loc["dense", "throughput_ratio"] == 1.0 and table.loc[DYNAMIC, "memory_ratio"] == 1.0
    assert table.loc["dense", "end_to_end_ratio"] == 1.0 == table.loc["dense", "prefill_ratio"]
    assert table.loc["pruned", "end_to_end_ratio"] == table.total_ms["dense"] / table.total_ms["pruned"]
    prefill, decode = table.attrs["prefill_times_ms"]["pruned"], table.attrs["times_ms"]["pruned"]
    totals = [a + b for a, b in zip(prefill, decode, strict=True)]
    assert table.loc["pruned", "total_ms"] == pytest.approx((totals[0] + totals[1]) / 2)  # the median of 2 repeats
    assert table.loc["pruned", "prefill_ratio"] == table.loc["dense", "prefill_ms"] / table.loc["pruned", "prefill_ms"]
    # the static cache holds T + new_tokens slots from the start, transformers' dynamic one the tokens seen
    assert table.loc["dense", "cache_mb_end"] * 55 == pytest.approx(table.loc[DYNAMIC, "cache_mb_end"] * 56)
    assert table.loc["pruned", "cache_mb_end"] < table.loc[DYNAMIC, "cache_mb_end"]
    assert table.loc["pruned", "live_fraction"] < 1.0 == table.loc["dense", "live_fraction"]
    assert table.loc[DYNAMIC, "live_fraction"] == 1.0
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
    # the prompt pass's limit, by hand: GPT-2's 12 d^2 + 13 d weights per layer and the final norm's 2 d once per
    # token, the 4 x heads x head width FLOPs per causal pair and layer, the tied output head for the last token,
    # and with pruning the interactions' weights and their r-wide scores over the same pairs
    d, layers, pairs = 32, 2, 2 * 48 * 49 / 2
    interaction = sum(p.numel() for n, p in model.named_parameters() if ".interaction." in n)
    dense_flops = 2 * 2 * 48 * (layers * (12 * d * d + 13 * d) + 2 * d) + layers * pairs * 4 * d + 2 * 2 * 64 * d
    pruned_flops = dense_flops + 2 * 2 * 48 * interaction + layers * pairs * 2 * 8
    assert table.loc["dense", "prompt_gflop"] * 1e9 == pytest.approx(dense_flops)
    assert table.loc["pruned", "prefill_limit"] == pytest.approx(dense_flops / pruned_flops)
    dense_ms = table.loc["dense", ["prefill_ms", "decode_ms"]]
    limits = table.loc["pruned", ["prefill_limit", "decode_limit"]].to_numpy()
    expected_limit = dense_ms.sum() / (dense_ms.to_numpy() / limits).sum()
    assert table.loc["pruned", "end_to_end_limit"] == pytest.approx(expected_limit)
    per_layer = table.attrs["live_by_layer"]
    assert per_layer["dense"] == [1.0, 1.0] and len(per_layer["pruned"]) == 2
    assert abs(sum(per_layer["pruned"]) / 2 - table.loc["pruned", "live_fraction"]) < 1e-6
    with pytest.raises(ValueError, match="baseline"):
        generation_table({"pruned": (model, {"prune": True})}, prompt, 2)
    with pytest.raises(ValueError, match="must be a dense run"):
        generation_table({"dense": (model, {"prune": True})}, prompt, 2)


def test_speedup_intervals_pair_the_repeats_of_every_phase():
    import numpy as np

    model = model_with(1.0)
    prompt = torch.randint(0, 64, (2, 24))
    table = generation_table({"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})}, prompt,
                             new_tokens=4, warmup=0, repeats=3)
    fair = speedup_intervals(table)
    assert list(fair.index) == [(name, phase) for name in (DYNAMIC, "pruned")
                                for phase in ("prefill", "decode", "end_to_end")]
    for phase, column in (("prefill", "prefill_ratio"), ("decode", "throughput_ratio"),
                          ("end_to_end", "end_to_end_ratio")):
        row = fair.loc[("pruned", phase)]
        assert row.speedup == pytest.approx(table.loc["pruned", column], rel=1e-9) and row.repeats == 3
        assert row.low <= row.speedup <= row.high
    assert fair.loc[("pruned", "decode"), "limit"] == table.loc["pruned", "decode_limit"]
    against_dynamic = speedup_intervals(table, DYNAMIC)
    times = table.attrs["times_ms"]
    assert against_dynamic.loc[("pruned", "decode"), "speedup"] == pytest.approx(
        np.median(times[DYNAMIC]) / np.median(times["pruned"]))
    assert np.isnan(against_dynamic.limit).all()  # limits are stated against the table's own baseline


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_dense_generates_the_greedy_tokens_with_either_transformers_cache(cache):
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(5))
    *_, used, tokens, _ = generate_once(model, prompt, 12, prune=False, cache=cache)
    assert type(used).__name__ == {"static": "StaticCache", "dynamic": "DynamicCache"}[cache]
    assert torch.equal(tokens, greedy_without_cache(model, prompt, 12, prune=False))
    with pytest.raises(ValueError, match="cache must be one of"):
        generate_once(model, prompt, 2, prune=False, cache="paged")


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


def test_generation_table_times_until_the_throughput_ratios_reach_their_target_or_the_ceiling():
    from bab.core.timing import Repeats

    model = model_with(1.0)
    prompt = torch.randint(0, 64, (2, 24))
    configs = {"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})}
    table = generation_table(configs, prompt, new_tokens=3, warmup=0, repeats=Repeats(2, target=1e-9, maximum=4))
    assert table.attrs["repeats"] == 4 and [len(t) for t in table.attrs["times_ms"].values()] == [4, 4, 4]


def test_generation_longer_than_the_context_raises():
    with pytest.raises(ValueError, match="longer than the model's maximum context"):
        generate_once(model_with(1.0), torch.zeros(1, 90, dtype=torch.long), new_tokens=10)


def test_batched_rows_hold_their_own_live_tokens_padded_to_the_longest_row_only():
    """Rows drop different tokens; each layer holds exactly its rows' live tokens, in buffers no longer than its
    longest row's live tokens plus the dead slots not yet worth a copy and 1/SLACK spare slots, and the generated
    logits still equal the full forward."""
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(6))
    verdicts = cache_verdicts(model, prompt, new_tokens=12)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"]
    _, _, _, cache, _, _ = generate_once(model, prompt, 12)
    rows_differ = False
    for layer in cache.layers:
        live = layer.live_tokens()  # [B]
        assert torch.equal(live, layer.valid.sum(dim=1)) and torch.equal(live, (layer.positions >= 0).sum(dim=1))
        longest, used, slots = int(live.max()), layer.used, layer.slots()
        assert layer.keys.shape[2] == layer.values.shape[2] == layer.int_keys.shape[1] == slots
        assert used - longest < PrunedLayer.COMPACT_AT * used  # more dead slots would have been compacted
        assert used <= slots <= used + used // PrunedLayer.SLACK + 1
        assert not layer.valid[:, used:].any()  # the spare slots hold nothing
        per_slot = (2 * 2 * 16 + 8) * 4 + 8 + 1  # keys, values (2 heads x 16), interaction key (r = 8); position, valid
        assert layer.nbytes() == 3 * slots * per_slot and layer.live_nbytes() == int(live.sum()) * per_slot
        rows_differ |= len(set(live.tolist())) > 1
    assert rows_differ  # not vacuous: some rows are padded
    assert cache.nbytes() == sum(layer.nbytes() for layer in cache.layers) > cache.live_nbytes()


def test_compaction_moves_the_live_slots_into_smaller_buffers(monkeypatch):
    """Every compaction leaves each row's live tokens, in order, at the front of new buffers of the longest row's
    live tokens plus 1/SLACK: no dead slot survives it and the old buffers are let go."""
    after = []
    compact = PrunedLayer._compact

    def spy(layer):
        before = (layer.used, layer.slots(), layer.keys)
        compact(layer)
        after.append((before, layer.slots(), layer.keys, layer.used, layer.live_tokens(), layer.valid.clone(),
                      layer.positions.clone()))

    monkeypatch.setattr(PrunedLayer, "_compact", spy)
    generate_once(model_with(1.0), torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(6)), 12)
    assert after  # not vacuous: the prompt's drops alone call for one
    for (old_used, old_slots, old_keys), slots, keys, used, live, valid, positions in after:
        assert keys is not old_keys and used < old_used and slots <= old_slots
        assert used == int(live.max()) and slots == used + max(used // PrunedLayer.SLACK, 1)
        front = torch.arange(slots)[None, :] < live[:, None]
        assert torch.equal(valid, front)
        for row in range(3):  # live positions in their order, then padding
            held = positions[row][: int(live[row])]
            assert bool((held[1:] > held[:-1]).all()) and bool((positions[row][int(live[row]):] == -1).all())


@pytest.mark.parametrize("compact_at", [0.0, 1.0])
def test_dead_slots_are_invisible_whenever_they_are_compacted(monkeypatch, compact_at):
    """Compacting at every drop (0.0) or never (1.0: dead slots stay, hidden by the mask) generates the same tokens
    and logits as the default, all equal to the full forward."""
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(7))
    reference = cache_verdicts(model, prompt, new_tokens=12)
    monkeypatch.setattr(PrunedLayer, "COMPACT_AT", compact_at)
    verdicts = cache_verdicts(model, prompt, new_tokens=12)
    assert verdicts["equals_full_forward"] and verdicts["never_reappear"]
    assert verdicts["live_fraction"] == reference["live_fraction"] < 1
    _, _, _, cache, tokens, _ = generate_once(model, prompt, 12)
    assert torch.equal(tokens, greedy_without_cache(model, prompt, 12, True))
    seen = 40 + 12 - 1
    for layer in cache.layers:
        # never compacted: every token given still has a slot, dead or live
        assert (layer.used == seen) if compact_at == 1.0 else (layer.used == int(layer.live_tokens().max()))


def test_a_long_call_scored_in_chunks_drops_what_one_chunk_would(monkeypatch):
    """The prompt's queries are scored PREFILL_CHUNK at a time: chunks of 7 (a prompt of 40 in 6 uneven chunks)
    leave the same tokens live, and generate the same logits, as one chunk."""
    model = model_with(1.0)
    prompt = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(8))
    states = []
    for chunk in (64, 7):
        monkeypatch.setattr(PrunedLayer, "PREFILL_CHUNK", chunk)
        verdicts = cache_verdicts(model, prompt, new_tokens=6)
        assert verdicts["equals_full_forward"] and verdicts["live_fraction"] < 1
        _, _, _, cache, tokens, _ = generate_once(model, prompt, 6)
        states.append((tokens, [(layer.positions[:, :layer.used], layer.valid[:, :layer.used])
                                for layer in cache.layers]))
    (tokens, layers), (chunked_tokens, chunked_layers) = states
    assert torch.equal(tokens, chunked_tokens)
    for (positions, valid), (chunked_positions, chunked_valid) in zip(layers, chunked_layers, strict=True):
        assert torch.equal(positions, chunked_positions) and torch.equal(valid, chunked_valid)
