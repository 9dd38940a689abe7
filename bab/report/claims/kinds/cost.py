"""Kinds of claim on cost, speed and memory: the soft cost tracks its budget (``CostTracks``), a measured speed-up
(``Speed``) and a KV cache that shrinks with the context kept (``MemoryFollowsPruning``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core import statistics
from bab.core.statistics import Interval
from bab.report.claims.evidence import Evidence, _exact
from bab.report.claims.kinds.base import Claim
from bab.report.claims.verdicts import Region, Row, Verdict, _not_run, _value, at_least, at_most, judged


@dataclass(frozen=True)
class CostTracks(Claim):
    """The soft cost of each row is close to its requested budget: the largest |cost - b| over the rows, judged
    against ``region``. The soft cost is the gates' mass, which does not depend on test examples: its interval
    covers the training seeds where there are several, and is exact for one."""

    rows: tuple[Row, ...] = ()
    region: Region = None
    theirs: tuple[Row, ...] = ()  # the paper's rows when ``rows`` are this package's recipe

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        found = {r: _value(r.find(rows), "cost") for r in self.rows}
        if None in found.values():
            return _not_run(*[r for r, v in found.items() if v is None])
        ours = max(abs(cost - r.budget) for r, cost in found.items())
        by_seed = evidence.per_seed(self.rows, "cost")
        if by_seed:
            misses = [max(abs(float(m["cost"]) - r.budget) for r, m in zip(self.rows, matched, strict=True))
                      for matched in by_seed.values()]
            interval = replace(statistics.seed_differences(misses, [0.0] * len(misses), 0),
                               covers=f"{len(misses)} seeds; the soft cost does not depend on test examples")
            interval = Interval(ours, min(interval.low, ours), max(interval.high, ours), interval.covers)
        else:
            interval = _exact(ours, "1 training seed; the soft cost does not depend on test examples (exact)")
        theirs = max(abs(r.paper()["cost"] - r.budget) for r in (self.theirs or self.rows))
        costs = ", ".join(f"{cost:.3f} @{r.budget:g}" for r, cost in found.items())
        return judged(self.region, interval, theirs, f"largest |cost - b| {interval.text('.3f')} (paper "
                      f"{theirs:.3f}): {costs}", ".3f")


@dataclass(frozen=True)
class Speed(Claim):
    """A measured speed-up (dense time / ours). "Up to x" or "x faster" holds when the measured ratio reaches the
    paper's ratio or our analytic limit, whichever is lower (a speed-up beyond the limit of our model's arithmetic
    cannot be asked of it), less the paper's rounding ``delta``."""

    row: Row = None
    delta: float = 0.01  # the papers give speed-ups to two decimals
    theirs: Row | None = None  # the paper's row when ``row`` is this package's recipe
    theirs_value: float | None = None  # the paper's ratio where it has no row (a text's "up to 2x")
    faster: bool = True  # False: the claim is that there is no speed-up (at most 1x plus the rounding)

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        found = self.row.find(rows)
        ours = _value(found, "speedup")
        if ours is None:
            return _not_run(self.row)
        theirs = self.theirs_value if self.theirs_value is not None else (self.theirs or self.row).paper()["speedup"]
        limit = _value(found, "analytic_limit")
        target = theirs if limit is None else min(theirs, limit)
        if self.faster:
            region = at_least(target - self.delta, f"the paper's {theirs:.2f}x" + (
                "" if limit is None else f" or our analytic limit {limit:.2f}x, whichever is lower") +
                f", less its rounding {self.delta:g}")
        else:
            region = at_most(1.0 + self.delta, f"no speed-up: at most 1x plus the paper's rounding {self.delta:g}")
        evidence = evidence or Evidence()
        interval = evidence.speedup(found) or _exact(ours, evidence.no_interval(
            [found], "ms", "the per-repeat times", "point estimate, the median of interleaved repeats"))
        return judged(region, interval, theirs, f"{ours:.2f}x measured vs the paper's {theirs:.2f}x"
                      + ("" if limit is None else f", analytic limit {limit:.2f}x"), ".2f")


@dataclass(frozen=True)
class MemoryFollowsPruning(Claim):
    """Dropped tokens leave the KV cache, so the cache shrinks as the context kept does: the measured memory ratio
    (dense cache bytes / ours) over the ratio the fraction of context kept implies (1 / cost), against ``region``.
    Bytes are counted, not sampled: the number is exact for one model, and its interval covers the training seeds
    (which tokens each seed's model drops) where there are several."""

    row: Row = None
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        found = self.row.find(rows)
        ours, kept = _value(found, "memory_ratio"), _value(found, "cost")
        if ours is None or not kept:
            return _not_run(self.row)
        implied = 1.0 / kept
        # each seed's model keeps its own fraction, so the share is taken per seed and then averaged
        by_seed = (evidence or Evidence()).per_seed([self.row], "memory_ratio").values()
        shares = [m["memory_ratio"] * m["cost"] for (m,) in by_seed if m.get("cost")]
        if len(shares) > 1:
            interval = replace(statistics.seed_differences(shares, [0.0] * len(shares), 0),
                               covers=f"{len(shares)} seeds; bytes counted, exact for each seed's model")
        else:
            interval = _exact(ours / implied, "1 training seed; bytes counted (exact)")
        return judged(self.region, interval, None,
                      f"KV cache {ours:.2f}x smaller than dense, {interval.value:.0%} of the {implied:.2f}x that "
                      f"{kept:.1%} of the context kept implies", ".2f")
