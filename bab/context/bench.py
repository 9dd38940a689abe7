"""Generation speed and KV-cache memory through ``model.generate()``: context-pruned decoders against dense.

Protocol (bab.core.timing): one intra-op and one inter-op thread, ``eval()``, the same prompt batch [B, T] for every
model, warm-up runs, then the repeats interleaved across the models (drift hits all alike) and the median reported.
One run = ``model.generate`` (greedy, exactly ``new_tokens`` tokens, no stop at end-of-text) with a fresh cache:
for dense, transformers' ``StaticCache`` (keys and values written in place into buffers of T + new_tokens slots:
the fair baseline, every ratio is against it) and its ``DynamicCache`` (which concatenates its whole cache at every
step) beside it; a ``PrunedCache`` (bab.context.pruned_cache) that removes dropped tokens for the pruned models. A
logits processor notes the time of every step: the prompt pass (prefill) is the time to the first step, decoding
the rest; throughput is B * (new_tokens - 1) / decode seconds.

Each phase's speed-up (prefill, decode, end to end) has a 95% interval over the paired repeats
(``speedup_intervals``) and stands beside its analytic limit: decoding is bound by the bytes a step reads (the
weights and the live cache), the prompt pass by its FLOPs (the interactions' projections and scores come on top of
dense's), and end to end by both, weighted by dense's own prefill and decode times.

Memory: the bytes held by the cache (keys, values and, for pruning, the interaction keys and slot positions) at the
end of generation and at their peak over the steps; ``memory_ratio`` is over transformers' ``DynamicCache``, which
holds exactly the tokens seen.

    python -m bab bench generation --profile quick     # the notebook-06 checkpoints (trained if not cached)
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import ExitStack

import pandas as pd
import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, StaticCache

from bab.context.evicting_cache import EvictingCache, evicting
from bab.context.eviction import EvictionPolicy
from bab.context.lm import check_length, kv_shape, lm_forward, prunes, settings
from bab.context.pruned_cache import PrunedCache
from bab.core.statistics import ratio_of_medians
from bab.core.timing import TIMES, Repeats, enough_repeats, single_thread
from bab.core.timing import repeat_times as repeat_times  # a row's paired repeats of a generation_table


def cache_bytes(cache) -> int:
    """Bytes held by every layer of a transformers cache (a PrunedCache's positions and validity included)."""
    total = 0
    for layer in cache.layers:
        tensors = layer.tensors() if hasattr(layer, "tensors") else (layer.keys, layer.values)
        total += sum(t.numel() * t.element_size() for t in tensors if t is not None)
    return total


def live_tokens(cache) -> torch.Tensor:
    """[L, B] tokens each layer holds for each row."""
    if isinstance(cache, (PrunedCache, EvictingCache)):
        return cache.live_tokens()
    if isinstance(cache, StaticCache):  # its buffers hold max_cache_len slots, the tokens seen so far filled
        return torch.stack([torch.full((layer.keys.shape[0],), layer.get_seq_length()) for layer in cache.layers])
    return torch.stack([torch.full((layer.keys.shape[0],), layer.keys.shape[2]) for layer in cache.layers])


class _StepWatch(LogitsProcessor):
    """Called by ``generate`` once per new token, after the forward that scored it: notes the time, the cache's bytes
    and (if asked) each layer's live positions per row."""

    def __init__(self, cache, live_sets: bool = False):
        self.cache, self.times, self.bytes, self.live = cache, [], [], [] if live_sets else None
        self.live_after_prompt = None  # live tokens summed over layers and rows, at the first step

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        if self.live_after_prompt is None:
            self.live_after_prompt = int(live_tokens(self.cache).sum())
        self.bytes.append(cache_bytes(self.cache))
        if self.live is not None:
            self.live.append(_live_sets(self.cache))
        return scores


DENSE_CACHES = ("static", "dynamic")  # transformers' caches a dense model generates with


def _generate(model, prompt: torch.Tensor, new_tokens: int, prune: bool, budget, watch_live: bool = False,
              policy: EvictionPolicy | None = None, cache: str = "dynamic"):
    """Greedy ``generate`` of exactly ``new_tokens`` tokens -> (start time, the watch, the cache, generate's output).
    With an eviction ``policy``: a plain decoder with an ``EvictingCache`` instead. ``cache``: which of
    transformers' caches a dense run (no pruning, no policy) gets, "static" (in place) or "dynamic"."""
    if cache not in DENSE_CACHES:
        raise ValueError(f"cache must be one of {DENSE_CACHES}, got {cache!r}")
    B, T = prompt.shape
    check_length(model, T + new_tokens)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    with ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if policy is not None:
            stack.enter_context(evicting(model))
            cache = EvictingCache(policy)
        else:
            pruning = stack.enter_context(settings(model, budget=budget, prune=prune))
            cache = (PrunedCache() if pruning
                     else StaticCache(config=model.config, max_cache_len=T + new_tokens) if cache == "static"
                     else DynamicCache())
        watch = _StepWatch(cache, watch_live)
        start = time.perf_counter()
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config,
                             past_key_values=cache, logits_processor=LogitsProcessorList([watch]))
    return start, watch, cache, out


def generate_once(model, prompt: torch.Tensor, new_tokens: int, prune: bool = True, budget: float | None = None,
                  policy: EvictionPolicy | None = None, cache: str = "dynamic"):
    """Greedy generation through ``model.generate`` (with a training-free eviction ``policy``: on a plain decoder,
    with an ``EvictingCache``; dense: with transformers' ``cache``, "static" or "dynamic").

    Returns (prefill s, decode s (the new_tokens - 1 steps after the prompt pass), peak cache bytes, cache, tokens
    [B, new_tokens], live tokens after the prompt summed over layers and rows).
    """
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 (one step after the prompt pass to time), got {new_tokens}")
    start, watch, cache, out = _generate(model, prompt, new_tokens, prune, budget, policy=policy, cache=cache)
    prefill_s = watch.times[0] - start
    decode_s = watch.times[-1] - watch.times[0]  # new_tokens - 1 steps
    return (prefill_s, decode_s, max(watch.bytes), cache, out.sequences[:, prompt.shape[1]:],
            watch.live_after_prompt)


def weight_bytes(model) -> int:
    """Bytes of every parameter (the interaction modules included): what one decode step reads at least."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bytes_per_cached_token(model, prune: bool) -> int:
    """Bytes a decode step reads per live token and layer: its key and value (G heads x Dh), and with pruning
    its interaction key (r)."""
    heads, head_dim = kv_shape(model)
    r = model.bab_context.pruning.r if (prune and prunes(model)) else 0
    return (2 * heads * head_dim + r) * next(model.parameters()).element_size()


def prompt_flops(model, batch: int, length: int, prune: bool) -> float:
    """FLOPs of the prompt pass of ``generate`` on [batch, length] tokens, counted analytically: every weight of the
    decoder's layers once per token (2 FLOPs a multiply-add; the interactions' projections are among them), causal
    attention over the T (T + 1) / 2 pairs of each layer, the output head for the last token only (as ``generate``
    computes it) and, with pruning, the interaction scores over the same pairs (r wide)."""
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    head = model.get_output_embeddings()
    outside = {id(p) for m in [*embeddings, head] for p in m.parameters()}
    interaction = sum(p.numel() for n, p in model.named_parameters() if ".interaction." in n)
    inside = sum(p.numel() for p in model.parameters() if id(p) not in outside) - (0 if prune else interaction)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    _, head_dim = kv_shape(model)
    pairs = batch * length * (length + 1) / 2
    flops = 2 * batch * length * inside + layers * pairs * 4 * heads * head_dim + 2 * batch * head.weight.numel()
    if prune and prunes(model):
        flops += layers * pairs * 2 * model.bab_context.pruning.r
    return flops


@torch.no_grad()
def cache_verdicts(model, prompt: torch.Tensor, new_tokens: int, budget: float | None = None,
                   atol: float = 1e-4) -> dict:
    """Structural checks of pruned generation (``generate`` with a ``PrunedCache``, greedy) on ``prompt`` [B, T].

    - ``equals_full_forward``: the logits of every generated token equal the full-sequence forward pass (hard
      decisions) of the generated sequence at that position;
    - ``never_reappear``: at every step the live positions of every layer and row are a subset of the previous
      step's plus the new token;
    - ``cache_shrinks``: at the end the key/value buffers of all layers together hold fewer slots than a dense cache
      of the same tokens (capacity, not a mask; a layer that drops little may still hold them all);
    - ``live_fraction``: live tokens at the end / tokens given (mean over layers and rows).

    The last generated token is never fed back, so the cache has seen T + new_tokens - 1 tokens.
    """
    B, T = prompt.shape
    _, watch, cache, out = _generate(model, prompt, new_tokens, True, budget, watch_live=True)
    seq = out.sequences
    never_reappear = True
    for step in range(1, len(watch.live)):
        new_position = T + step - 1  # the token fed at this step
        never_reappear &= all(now <= before | {new_position}
                              for layer_now, layer_before in zip(watch.live[step], watch.live[step - 1], strict=True)
                              for now, before in zip(layer_now, layer_before, strict=True))
    seen = seq.shape[1] - 1  # tokens the cache was given
    full = lm_forward(model, seq[:, :-1], budget=budget).logits[:, T - 1:]  # what predicted tokens T .. T + new - 1
    stepped = torch.stack(out.logits, dim=1)
    return {"equals_full_forward": bool(torch.allclose(stepped, full, atol=atol)),
            "max_abs_diff": (stepped - full).abs().max().item(),
            "never_reappear": bool(never_reappear),
            "cache_shrinks": sum(layer.keys.shape[2] for layer in cache.layers) < len(cache.layers) * seen,
            "live_fraction": live_tokens(cache).float().mean().item() / seen}


def _live_sets(cache) -> list[list[set]]:
    """Per layer and row: the positions the cache holds."""
    return [[set(layer.positions[b][layer.valid[b]].tolist()) for b in range(layer.keys.shape[0])]
            for layer in cache.layers]


DYNAMIC = "dense, DynamicCache"  # the row of the baseline model generating with transformers' DynamicCache
PHASES = {"prefill": "prefill_times_ms", "decode": TIMES, "end_to_end": "total_times_ms"}  # phase -> its attrs


def generation_table(configs: dict, prompt: torch.Tensor, new_tokens: int, warmup: int = 1,
                     repeats: int | Repeats = 3, baseline: str = "dense") -> pd.DataFrame:
    """Speed and cache memory of each named (model, {"prune": bool, "budget": ...} or {"policy": an eviction
    policy}). The ``baseline`` (a dense model) generates with transformers' in-place ``StaticCache``, and once more,
    as the row ``DYNAMIC``, with its ``DynamicCache``.

    Columns: tokens_per_s (median), throughput_ratio (decode speed over the baseline's), decode_limit,
    prefill_ratio (the baseline's prompt-pass time over ours), prefill_limit, end_to_end_ratio (prefill + decode),
    end_to_end_limit, decode_ms, prefill_ms, total_ms (the median of prefill + decode), cache_mb_end,
    cache_mb_peak, memory_ratio (``DYNAMIC``'s end bytes over ours: transformers' cache holding exactly the tokens
    seen), live_fraction (live tokens at the end / tokens the cache was given, T + new_tokens - 1, mean over layers
    and rows); ``table.attrs["live_by_layer"]`` has that fraction per layer for every config.
    ``speedup_intervals(table)`` gives each ratio's 95% interval.

    The analytic limits. Decoding: at batch sizes like these a step is bound by the bytes it reads, all the weights
    plus the live cache, so ``read_mb_per_step`` = weights + the bytes of the live tokens (keys, values, interaction
    keys; the mean of after the prompt and at the end) and ``decode_limit`` = the baseline's bytes per step / ours.
    The prompt pass: ``prefill_limit`` = the baseline's FLOPs / ours (``prompt_flops``; at most 1: pruning adds the
    interactions' work). End to end: the baseline's prefill and decode times over the same times divided by those
    limits.

    ``table.attrs``: per config the ms of every repeat of decode (``TIMES``), prefill and prefill + decode (the
    baseline's and each config's repeat i run in the same round); ``repeat_times(table, name)`` gives a result row's
    ``dense_ms`` and ``ms`` of decoding. ``repeats``: a count, or ``Repeats`` with a target for the decode ratios'
    intervals (``bab.core.timing``); ``attrs["repeats"]`` is the number of rounds timed.
    """
    repeats = Repeats.of(repeats)
    if baseline not in configs:
        raise ValueError(f"generation_table needs the baseline {baseline!r} among the configs {list(configs)}")
    if DYNAMIC in configs:
        raise ValueError(f"{DYNAMIC!r} is the baseline's own second row; name that config otherwise")
    dense_model, dense_kwargs = configs[baseline]
    if dense_kwargs.get("prune", True) or "policy" in dense_kwargs:
        raise ValueError(f"the baseline {baseline!r} must be a dense run: {{'prune': False}}, got {dense_kwargs}")
    configs = {baseline: (dense_model, {**dense_kwargs, "cache": "static"}),
               DYNAMIC: (dense_model, {**dense_kwargs, "cache": "dynamic"}),
               **{name: config for name, config in configs.items() if name != baseline}}
    B, T = prompt.shape
    seen = T + new_tokens - 1  # tokens each cache is given: the last generated one is never fed back
    runs = {name: [] for name in configs}
    with single_thread():
        for _ in range(warmup):
            for model, kwargs in configs.values():
                generate_once(model, prompt, new_tokens, **kwargs)
        while not enough_repeats({name: [r[1] for r in results] for name, results in runs.items()}, baseline,
                                 repeats):
            for name, (model, kwargs) in configs.items():
                runs[name].append(generate_once(model, prompt, new_tokens, **kwargs))
    rows, live_by_layer = [], {}
    for name, results in runs.items():
        decode_s = statistics.median(r[1] for r in results)
        _, _, peak, cache, _, _ = results[-1]
        model, kwargs = configs[name]
        live_end = live_tokens(cache)  # [L, B]
        live = (results[-1][5] + int(live_end.sum())) / 2  # mean over the steps, as tokens arrive and leave
        prunes_here = kwargs.get("prune", True) and "policy" not in kwargs
        read = weight_bytes(model) + bytes_per_cached_token(model, prunes_here) * live
        rows.append({"config": name, "tokens_per_s": B * (new_tokens - 1) / decode_s, "decode_ms": 1e3 * decode_s,
                     "prefill_ms": 1e3 * statistics.median(r[0] for r in results),
                     "total_ms": 1e3 * statistics.median(r[0] + r[1] for r in results),
                     "cache_mb_end": cache_bytes(cache) / 2**20, "cache_mb_peak": peak / 2**20,
                     "read_mb_per_step": read / 2**20, "prompt_gflop": prompt_flops(model, B, T, prunes_here) / 1e9,
                     "live_fraction": live_end.float().mean().item() / seen})
        live_by_layer[name] = (live_end.float().mean(dim=1) / seen).tolist()
    table = pd.DataFrame(rows).set_index("config")
    dense = table.loc[baseline]
    table.insert(1, "throughput_ratio", table.tokens_per_s / dense.tokens_per_s)
    table.insert(2, "decode_limit", dense.read_mb_per_step / table.read_mb_per_step)
    table.insert(3, "prefill_ratio", dense.prefill_ms / table.prefill_ms)
    table.insert(4, "prefill_limit", dense.prompt_gflop / table.prompt_gflop)
    table.insert(5, "end_to_end_ratio", dense.total_ms / table.total_ms)
    table.insert(6, "end_to_end_limit", (dense.prefill_ms + dense.decode_ms)
                 / (dense.prefill_ms / table.prefill_limit + dense.decode_ms / table.decode_limit))
    table["memory_ratio"] = table.loc[DYNAMIC, "cache_mb_end"] / table.cache_mb_end
    table.attrs.update(batch=B, prompt=T, new_tokens=new_tokens, repeats=len(runs[baseline]), warmup=warmup,
                       live_by_layer=live_by_layer, baseline=baseline)
    table.attrs[TIMES] = {name: [1e3 * r[1] for r in results] for name, results in runs.items()}
    table.attrs["prefill_times_ms"] = {name: [1e3 * r[0] for r in results] for name, results in runs.items()}
    table.attrs["total_times_ms"] = {name: [1e3 * (r[0] + r[1]) for r in results] for name, results in runs.items()}
    return table


def speedup_intervals(table: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Each config's speed-up over ``baseline`` (default: the table's own, the in-place dense) in every phase, with
    its 95% interval over the paired repeats (``bab.core.statistics.ratio_of_medians``) and, against the table's
    own baseline, its analytic limit. Rows (config, phase); columns speedup, low, high, limit, repeats."""
    baseline = baseline or table.attrs["baseline"]
    limits = {"prefill": "prefill_limit", "decode": "decode_limit", "end_to_end": "end_to_end_limit"}
    rows = []
    for name in table.index.drop(baseline):
        for phase, times in PHASES.items():
            dense_ms, ms = table.attrs[times][baseline], table.attrs[times][name]
            if len(ms) >= 2:
                interval = ratio_of_medians(dense_ms, ms)
                speedup, low, high = interval.value, interval.low, interval.high
            else:  # one repeat: a ratio, no interval
                speedup, low, high = statistics.median(dense_ms) / statistics.median(ms), math.nan, math.nan
            limit = table.loc[name, limits[phase]] if baseline == table.attrs["baseline"] else math.nan
            rows.append({"config": name, "phase": phase, "speedup": speedup, "low": low, "high": high,
                         "limit": limit, "repeats": len(ms)})
    return pd.DataFrame(rows).set_index(["config", "phase"])
