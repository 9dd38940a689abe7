"""The timing protocol: measured speed against dense in the same process, and FLOP counting.

Protocol (docs/speed.md): pre-built batches, ``torch.no_grad()``, ``eval()``, one intra-op and
one inter-op thread, warm-up passes, then the median of repeated timings with the dense and the
sparse model interleaved so drift hits both alike. How many repeats: a fixed count, or (``Repeats``
with a ``target``) as many as each speed-up's 95% interval needs to lie within a stated fraction of it,
between a floor and a ceiling. FLOPs are counted by ``FlopCounterMode`` on the very forward passes
that are timed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from bab.core.statistics import ratio_of_medians


@dataclass
class Timing:
    median_ms: float
    times_ms: list[float]


@dataclass(frozen=True)
class Repeats:
    """How many interleaved rounds to time. ``minimum`` rounds always; with a ``target``, more rounds until the
    95% interval of every speed-up over the baseline (``ratio_of_medians`` over the paired rounds) lies within
    ``target`` of it on both sides (0.02: the speed-up known to +-2%), at most ``maximum`` rounds. A quiet
    machine stops at the floor, a loaded one times on until its ratios are as well known, or says at the
    ceiling that they are not (``within_target``)."""

    minimum: int = 5
    target: float | None = None
    maximum: int | None = None

    def __post_init__(self):
        if self.minimum < 1:
            raise ValueError(f"repeats must be >= 1, got {self.minimum}")
        if self.target is None:
            if self.maximum is not None:
                raise ValueError("a maximum number of repeats needs a target (the fraction the speed-ups' "
                                 "intervals must reach), e.g. Repeats(5, target=0.02, maximum=60)")
            return
        if not 0 < self.target < 1:
            raise ValueError(f"target is the relative half-width of a speed-up's interval, in (0, 1), "
                             f"e.g. 0.02 for +-2%; got {self.target}")
        if self.minimum < 2:
            raise ValueError(f"an interval needs at least 2 repeats: with a target, minimum must be >= 2, "
                             f"got {self.minimum}")
        if self.maximum is None or self.maximum < self.minimum:
            raise ValueError(f"with a target, give the most repeats to time (maximum >= minimum = {self.minimum}), "
                             f"got {self.maximum}")

    @classmethod
    def of(cls, repeats: int | Repeats) -> Repeats:
        """``repeats`` as given, or a fixed count as ``Repeats(count)``."""
        return repeats if isinstance(repeats, Repeats) else cls(int(repeats))

    def rule(self) -> str:
        """The stopping rule in words: "20 repeats", or "5 to 60 repeats, until each speed-up was within +-2%"."""
        if self.target is None:
            return f"{self.minimum} repeats"
        return f"{self.minimum} to {self.maximum} repeats, until each speed-up was within +-{100 * self.target:g}%"

    def describe(self, done: int | list[int]) -> str:
        """How many rounds were timed (``done``: a count, or one per timing), in words: "20 repeats", or
        "12 / 7 repeats (5 to 60, until each speed-up was within +-2%)"."""
        counts = " / ".join(str(int(n)) for n in ([done] if isinstance(done, int) else done))
        if self.target is None:
            return f"{counts} repeats"
        return f"{counts} repeats ({self.rule().replace(' repeats,', ',')})"


def relative_half_width(baseline_ms, ms) -> float:
    """The larger side of the 95% interval of median(baseline) / median(ms) over paired repeats, as a fraction
    of the ratio."""
    interval = ratio_of_medians(baseline_ms, ms)
    return max(interval.high - interval.value, interval.value - interval.low) / interval.value


def within_target(times: dict[str, list[float]], baseline: str, target: float) -> bool:
    """Whether every ratio of ``baseline``'s median time to another name's lies within ``target`` of its interval."""
    return all(relative_half_width(times[baseline], t) <= target for name, t in times.items() if name != baseline)


def enough_repeats(times: dict[str, list[float]], baseline: str, repeats: Repeats) -> bool:
    """Whether the rounds timed so far (``times``: each name's ms per round) are enough for ``repeats``."""
    done = len(times[baseline])
    if done < repeats.minimum:
        return False
    if repeats.target is None or done >= repeats.maximum:
        return True
    return within_target(times, baseline, repeats.target)


def speedup_columns(timing: dict[str, Timing], before: str, after: str, labels: tuple[str, str] | None = None) -> dict:
    """A bench row's columns for two variants timed side by side (``time_side_by_side``): each median ("<label> ms";
    ``labels`` default to the timed names), the speed-up of ``after`` over ``before`` with its 95% interval over the
    paired repeats, and how many repeats were timed."""
    labels = (before, after) if labels is None else labels
    speed_up = ratio_of_medians(timing[before].times_ms, timing[after].times_ms)
    return {f"{labels[0]} ms": timing[before].median_ms, f"{labels[1]} ms": timing[after].median_ms,
            "speed-up": speed_up.value, "speed-up low": speed_up.low, "speed-up high": speed_up.high,
            "repeats": len(timing[before].times_ms)}


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
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
def time_side_by_side(fns: dict, warmup: int = 5, repeats: int | Repeats = 20, on_round=None,
                      baseline: str | None = None) -> dict[str, Timing]:
    """Median wall time (ms) of each zero-argument callable, interleaved round by round: a fixed number of rounds,
    or as many as ``Repeats`` asks for, each speed-up taken over ``baseline`` (default: the first name).
    ``on_round(i)``, if given, is called after each round, warm-up rounds included (i = 1, 2, ...): a progress
    clock's tick."""
    repeats = Repeats.of(repeats)
    baseline = next(iter(fns)) if baseline is None else baseline
    if baseline not in fns:
        raise ValueError(f"the baseline {baseline!r} is not among the timed names {list(fns)}")
    for i in range(warmup):
        for fn in fns.values():
            fn()
        if on_round is not None:
            on_round(i + 1)
    times = {name: [] for name in fns}
    while not enough_repeats(times, baseline, repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - start))
        if on_round is not None:
            on_round(warmup + len(times[baseline]))
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
