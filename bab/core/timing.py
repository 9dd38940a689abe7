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
def time_side_by_side(fns: dict, warmup: int = 5, repeats: int = 20) -> dict[str, Timing]:
    """Median wall time (ms) of each zero-argument callable, interleaved round by round."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - start))
    return {name: Timing(statistics.median(t), t) for name, t in times.items()}


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
