"""The timing protocol: measured speed against dense in the same process, and FLOP counting.

Protocol (docs/speed.md): pre-built batches, ``torch.no_grad()``, ``eval()``, one intra-op and
one inter-op thread, warm-up passes, then the median of repeated timings with the dense and the
sparse model interleaved so drift hits both alike. FLOPs are counted by ``FlopCounterMode`` on
the very forward passes that are timed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count


@dataclass
class Timing:
    median_ms: float
    times_ms: list[float]


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of the CPU flash-attention kernel: Q K^T and P V, as torch counts its CUDA kernels."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


# FlopCounterMode has formulas for the CUDA SDPA kernels but none for the CPU one, which it would
# count as zero: every attention core timed on CPU would vanish from the FLOPs (and the limits).
CPU_SDPA_FLOPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flop}


def count_flops(fn) -> int:
    """FLOPs of one call of ``fn``: matrix products only, 2 per multiply-add, SDPA on CPU included."""
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as counter:
        fn()
    return counter.get_total_flops()


@torch.no_grad()
def time_side_by_side(fns: dict, warmup: int = 5, repeats: int = 20, on_round=None) -> dict[str, Timing]:
    """Median wall time (ms) of each zero-argument callable, interleaved round by round. ``on_round(i)``, if given,
    is called after each round, warm-up rounds included (i = 1 .. warmup + repeats): a progress clock's tick."""
    for i in range(warmup):
        for fn in fns.values():
            fn()
        if on_round is not None:
            on_round(i + 1)
    times = {name: [] for name in fns}
    for i in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - start))
        if on_round is not None:
            on_round(warmup + i + 1)
    return {name: Timing(statistics.median(t), t) for name, t in times.items()}


# The attribute of a timing table (``bab.heads.bench.latency_table``, ``bab.context.bench.generation_table``) that
# holds every configuration's per-repeat times, {name: [ms of repeat 0, 1, ...]}, behind its median and speed-up.
TIMES = "times_ms"


def repeat_times(table, name: str, baseline: str = "dense") -> dict[str, list[float]]:
    """The paired repeats behind ``table``'s speed-up of ``name`` over ``baseline``, as a result row's stats take
    them (``bab.core.outcomes``): ``dense_ms`` (the baseline's time of each repeat) and ``ms`` (``name``'s), repeat i
    of both from the same interleaved round, so median(dense_ms) / median(ms) is the table's speed-up."""
    times = getattr(table, "attrs", {}).get(TIMES)
    if times is None:
        raise ValueError(f"this table keeps no per-repeat times (attrs[{TIMES!r}]); time it with "
                         "bab.heads.bench.latency_table or bab.context.bench.generation_table")
    for key in (baseline, name):
        if key not in times:
            raise ValueError(f"no per-repeat times of {key!r} in this table; it has {list(times)}")
    return {"dense_ms": list(times[baseline]), "ms": list(times[name])}


class single_thread:
    """Context manager: one intra-op and one inter-op thread (inter-op can only be set once)."""

    def __enter__(self):
        self.saved = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set in this process (it may be set only once); intra-op is what matters here
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self.saved)
