"""Generation throughput and KV-cache memory: context-pruned GPT-2 against dense, in the same process.

Protocol (bab.core.timing): one intra-op and one inter-op thread, ``eval()``, ``no_grad()``, the
same prompt batch [B, T] for every model, warm-up runs, then the repeats interleaved across the
models (drift hits all alike) and the median reported. One run = a fresh cache, the prompt
(prefill, timed separately) and ``new_tokens`` greedy decoding steps (timed): throughput is
B * new_tokens / decode seconds. The dense model runs the same code with pruning off and a
cache preallocated to its final length (appends only, no copies: the fastest dense cache);
the pruned models remove dropped tokens from their caches (at once, or batched with ``compact_every``).

Memory: the bytes held by the cache buffers (keys, values and, for pruning, the interaction
keys and slot indices) at the end of generation and at their peak over the decoding steps.

    python -m bab bench generation --profile quick     # the notebook-06 checkpoints (trained if not cached)
"""

from __future__ import annotations

import statistics
import time

import pandas as pd
import torch

from bab.core.timing import TIMES, single_thread
from bab.core.timing import repeat_times as repeat_times  # a row's paired repeats of a generation_table


@torch.no_grad()
def generate_once(model, prompt: torch.Tensor, new_tokens: int, prune: bool = True, budget: float | None = None,
                  compact_every: float = 0.0):
    """Greedy generation with a KV cache.

    Returns (prefill s, decode s, peak cache bytes, cache, tokens, live tokens after the prompt summed over
    layers and rows).

    ``compact_every``: see bab.context.kv_cache.LayerKV (0: copy the live tokens at every drop).
    """
    B, T = prompt.shape
    model.check_length(T + new_tokens)
    capacity = T + new_tokens if not (prune and model.prunes) else T
    start = time.perf_counter()
    cache = model.new_cache(B, capacity, prune=prune, compact_every=compact_every)
    logits = model.prefill(prompt, cache, budget=budget, prune=prune)
    prefill_s = time.perf_counter() - start
    peak = cache.nbytes()
    start_live = int(cache.live_tokens().sum())
    tokens = []
    start = time.perf_counter()
    for _ in range(new_tokens):
        nxt = logits.argmax(-1, keepdim=True)
        tokens.append(nxt)
        logits = model.decode_step(nxt, cache, budget=budget, prune=prune)
        peak = max(peak, cache.nbytes())
    decode_s = time.perf_counter() - start
    return prefill_s, decode_s, peak, cache, torch.cat(tokens, dim=1), start_live


def weight_bytes(model) -> int:
    """Bytes of every parameter (the interaction modules included): what one decode step reads at least."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bytes_per_cached_token(model, prune: bool) -> int:
    """Bytes a decode step reads per live token and layer: its key and value (G heads x Dh), and with pruning
    its interaction key (r)."""
    heads, head_dim = model.kv_shape
    r = model.config.pruning.r if (prune and model.prunes) else 0
    return (2 * heads * head_dim + r) * next(model.parameters()).element_size()


@torch.no_grad()
def cache_verdicts(model, prompt: torch.Tensor, new_tokens: int, budget: float | None = None,
                   atol: float = 1e-4, compact_every: float = 0.0) -> dict:
    """Structural checks of pruned generation on ``prompt`` [B, T] (greedy, ``new_tokens`` steps).

    - ``equals_full_forward``: the cached step logits equal the full-sequence forward pass (alpha = inf)
      of the generated sequence at every generated position;
    - ``never_reappear``: at every step the live positions of every layer and row are a subset of the
      previous step's plus the new token;
    - ``cache_shrinks``: at the end every layer's key/value buffers hold fewer slots than the sequence
      (and fewer than a dense cache: capacity, not a mask);
    - ``live_fraction``: live tokens at the end / sequence length (mean over layers and rows).
    """
    B, T = prompt.shape
    model.check_length(T + new_tokens)
    cache = model.new_cache(B, T, prune=True, compact_every=compact_every)
    logits = [model.prefill(prompt, cache, budget=budget)]
    seq = prompt
    previous = _live_sets(cache)
    never_reappear = True
    for _ in range(new_tokens):
        nxt = logits[-1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        logits.append(model.decode_step(nxt, cache, budget=budget))
        current = _live_sets(cache)
        new_position = cache.next_position - 1
        never_reappear &= all(now <= before | {new_position} for layer_now, layer_before in zip(current, previous,
                                                                                                 strict=True)
                              for now, before in zip(layer_now, layer_before, strict=True))
        previous = current
    full = model(seq[:, :-1], budget=budget).logits[:, T - 1:]  # logits that predicted tokens T .. T + new - 1
    stepped = torch.stack(logits[:-1], dim=1)
    return {"equals_full_forward": bool(torch.allclose(stepped, full, atol=atol)),
            "max_abs_diff": (stepped - full).abs().max().item(),
            "never_reappear": bool(never_reappear),
            "cache_shrinks": all(layer.keys.shape[2] < seq.shape[1] for layer in cache.layers),
            "live_fraction": cache.live_tokens().float().mean().item() / seq.shape[1]}


def _live_sets(cache) -> list[list[set]]:
    return [[set(layer.positions[b, : layer.length][layer.valid[b, : layer.length]].tolist())
             for b in range(layer.keys.shape[0])] for layer in cache.layers]


def generation_table(configs: dict, prompt: torch.Tensor, new_tokens: int, warmup: int = 1, repeats: int = 3,
                     baseline: str = "dense") -> pd.DataFrame:
    """Throughput and cache memory of each named (model, {"prune": bool, "budget": ..., "compact_every": ...}).

    Columns: tokens_per_s (median), throughput_ratio (over the baseline), end_to_end_ratio (baseline
    prefill + decode time over ours: the prompt pass included), decode_ms, prefill_ms,
    cache_mb_end, cache_mb_peak, memory_ratio (baseline end bytes / end bytes), live_fraction
    (live tokens at the end / sequence length, mean over layers and rows); ``table.attrs["live_by_layer"]``
    has that fraction per layer for every config.

    The analytic limit of decoding: at batch sizes like these a decode step is bound by the bytes it
    reads, all the weights plus the live KV cache, so ``read_mb_per_step`` = weights + the bytes of the
    live tokens (keys, values, interaction keys; the mean of after the prompt and at the end), and
    ``decode_limit`` = the baseline's bytes per step / ours: the throughput ratio a step that only
    streams memory would reach.

    ``table.attrs["times_ms"]``: each config's decode ms of every repeat (the baseline's and each config's repeat i
    run in the same round), so median(baseline) / median(config) is its throughput_ratio; ``repeat_times(table,
    name)`` gives a result row's ``dense_ms`` and ``ms``.
    """
    if baseline not in configs:
        raise ValueError(f"generation_table needs the baseline {baseline!r} among the configs {list(configs)}")
    B, T = prompt.shape
    runs = {name: [] for name in configs}
    with single_thread():
        for _ in range(warmup):
            for model, kwargs in configs.values():
                generate_once(model, prompt, new_tokens, **kwargs)
        for _ in range(repeats):
            for name, (model, kwargs) in configs.items():
                runs[name].append(generate_once(model, prompt, new_tokens, **kwargs))
    rows, live_by_layer = [], {}
    for name, results in runs.items():
        decode_s = statistics.median(r[1] for r in results)
        _, _, peak, cache, _, _ = results[-1]
        model = configs[name][0]
        live = (results[-1][5] + int(cache.live_tokens().sum())) / 2  # mean over the steps, as tokens arrive/leave
        read = weight_bytes(model) + bytes_per_cached_token(model, configs[name][1].get("prune", True)) * live
        rows.append({"config": name, "tokens_per_s": B * new_tokens / decode_s, "decode_ms": 1e3 * decode_s,
                     "prefill_ms": 1e3 * statistics.median(r[0] for r in results),
                     "cache_mb_end": cache.nbytes() / 2**20, "cache_mb_peak": peak / 2**20,
                     "read_mb_per_step": read / 2**20,
                     "live_fraction": cache.live_tokens().float().mean().item() / (T + new_tokens)})
        live_by_layer[name] = (cache.live_tokens().float().mean(dim=1) / (T + new_tokens)).tolist()
    table = pd.DataFrame(rows).set_index("config")
    table.insert(1, "throughput_ratio", table.tokens_per_s / table.loc[baseline, "tokens_per_s"])
    total_ms = table.prefill_ms + table.decode_ms  # the prompt pass included
    table.insert(2, "end_to_end_ratio", total_ms.loc[baseline] / total_ms)
    table["memory_ratio"] = table.loc[baseline, "cache_mb_end"] / table.cache_mb_end
    table.insert(2, "decode_limit", table.loc[baseline, "read_mb_per_step"] / table.read_mb_per_step)
    table.attrs.update(batch=B, prompt=T, new_tokens=new_tokens, repeats=repeats, warmup=warmup,
                       live_by_layer=live_by_layer)
    table.attrs[TIMES] = {name: [1e3 * r[1] for r in results] for name, results in runs.items()}
    return table
