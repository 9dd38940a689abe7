"""Kinds of claim on single numbers, counts and orders: a method's one number (``Statistic``), a number counted
rather than sampled (``Counted``), a column that moves one way as a setting grows (``FollowsSetting``), token kinds
pruned first (``KindsFirst``) and a claim no row measures yet (``NotYet``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core import statistics
from bab.core.statistics import Interval
from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence, _exact
from bab.report.claims.kinds.base import Claim
from bab.report.claims.verdicts import (
    Region,
    Row,
    Verdict,
    _from_parts,
    _not_run,
    _value,
    judged,
    rows_of,
)


@dataclass(frozen=True)
class Statistic(Claim):
    """A method's one number (its ``value``), ours against the paper's, against ``region``. ``not_comparable``:
    why our number cannot test the claim; ``not_informative``: why its outcome cannot tell anything about the method
    (e.g. arithmetic on the architecture, which any correct count reproduces)."""

    row: Row = None
    region: Region | None = None
    not_comparable: str = ""
    not_informative: str = ""
    beside: tuple[Row, ...] = ()  # rows of ours shown in the verdict's line, not judged

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        ours = _value(self.row.find(rows), "value")
        if ours is None:
            return _not_run(self.row)
        theirs = self.row.paper()["value"]
        shown = [f"{r.label()}: {_value(r.find(rows), 'value'):.3g}" for r in self.beside
                 if _value(r.find(rows), "value") is not None]
        line = f"{ours:.3g} vs the paper's {theirs:.3g}" + (f" ({'; '.join(shown)})" if shown else "")
        for status, reason in (("not comparable", self.not_comparable), ("not informative", self.not_informative)):
            if reason:
                return Verdict(status, ours, theirs, f"{line}: {reason}")
        return judged(self.region, _exact(ours, "exact: counted, not sampled"), theirs, line, ".3g")


@dataclass(frozen=True)
class Counted(Claim):
    """sum(coefficient x column) over ``terms`` ((Row, coefficient) pairs), a number counted rather than sampled
    (MHSA FLOPs, MACs removed, soft costs), against ``region``: exact for one model; where the notebook ran at
    several seeds, each seed's models count their own and the interval carries the seeds' spread."""

    terms: tuple = ()
    column: str = "cost"
    region: Region = None
    not_informative: str = ""

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        found = [_value(p.find(rows), self.column) for p, _ in self.terms]
        if None in found:
            return _not_run(*[p for (p, _), v in zip(self.terms, found, strict=True) if v is None])
        ours = sum(c * v for (_, c), v in zip(self.terms, found, strict=True))
        try:
            theirs = sum(c * float(p.paper()[self.column]) for p, c in self.terms)
        except (KeyError, TypeError):
            theirs = None
        shown = ", ".join(f"{p.label()}: {v:.3f}" for (p, _), v in zip(self.terms, found, strict=True))
        by_seed = (evidence or Evidence()).per_seed([p for p, _ in self.terms], self.column)
        if by_seed:  # each seed's model counts its own number: the interval carries the seeds' spread
            values = [sum(c * float(m[self.column]) for (_, c), m in zip(self.terms, matched, strict=True))
                      for matched in by_seed.values()]
            spread = statistics.seed_differences(values, [0.0] * len(values), 0)
            interval = Interval(ours, min(spread.low, ours), max(spread.high, ours),
                                f"{len(values)} seeds; each counted, not sampled")
        else:
            interval = _exact(ours, "exact: counted, not sampled")
        verdict = judged(self.region, interval, theirs, f"{shown}" + ("" if theirs is None else f" (paper "
                                                                                               f"{theirs:.3f})"), ".3f")
        if self.not_informative:
            return replace(verdict, status="not informative", why=f"{verdict.why}; {self.not_informative}")
        return verdict


@dataclass(frozen=True)
class FollowsSetting(Claim):
    """``method``'s rows sorted by their setting ``by`` (e.g. gamma, or "budget"): each step to the next larger one
    moves ``column`` as ``region`` asks of the difference next - previous (e.g. the fraction kept falls: < 0). A
    part per step, each judged over the training seeds where the notebook ran several (each seed's own difference,
    seeds resampled), exact for one model; the parts are listed closest to failing first."""

    method: Method = None
    by: str = "gamma"
    column: str = "cost"
    region: Region = None

    def _setting(self, row: dict) -> float:
        return float(row["budget"] if self.by == "budget" else row["settings"][self.by])

    def _steps(self, rows) -> list[tuple[dict, dict]]:
        mine = sorted(rows_of(self.method, rows, self.column), key=self._setting)
        return list(zip(mine, mine[1:], strict=False))

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        steps = self._steps(rows)
        if len(steps) < 2:
            return _not_run(Row(self.method, None, ((self.by, "any"),)))
        per_seed = [self._steps(seed_rows) for runs in evidence.seed_rows.values() for seed_rows in runs.values()]
        per_seed = [s for s in per_seed if len(s) == len(steps)]
        parts = []
        for i, (before, after) in enumerate(steps):
            value = float(after[self.column]) - float(before[self.column])
            if len(per_seed) > 1:
                differences = [float(s[i][1][self.column]) - float(s[i][0][self.column]) for s in per_seed]
                interval = replace(statistics.seed_differences(differences, [0.0] * len(differences), 0),
                                   covers=f"{len(differences)} seeds; the {self.column} is counted, not sampled")
            else:
                interval = _exact(value, f"1 training seed; the {self.column} is counted, not sampled (exact)")
            line = (f"{self.column} {float(before[self.column]):.3f} to {float(after[self.column]):.3f}")
            parts.append((f"{self.by} {self._setting(before):g} to {self._setting(after):g}",
                          judged(self.region, interval, None, line, "+.3f")))
        parts.sort(key=lambda part: -part[1].ours if self.region.high is not None else part[1].ours)
        held = sum(v.status == "reproduced" for _, v in parts)
        verdict = _from_parts(parts, region=f"every step: {self.column} difference {self.region.text('+.3f')}",
                              prefix=f"{held} of {len(parts)} steps to a larger {self.by} move the {self.column} as "
                                     f"claimed, the closest first: ")
        # the claim is about every step: one step the other way is enough to fail it
        return replace(verdict, status="not reproduced") if verdict.status == "partly" else verdict


@dataclass(frozen=True)
class KindsFirst(Claim):
    """``first`` kinds of tokens lose a larger share of their pairs than ``other`` on every held-out text of
    ``method``'s rows (settings ``kind``, ``text``). A claim with parts, one per (text, kind), each judged by the
    difference in share pruned (points) on the same windows, bootstrapped over the windows where the rows kept each
    window's counts (a point estimate where not); the parts are listed smallest difference first."""

    method: Method = None
    first: tuple[str, ...] = ("punctuation", "stop word")
    other: str = "other"

    def _difference(self, row: dict, other: dict, evidence: Evidence):
        matched = evidence.matched_outcomes([row, other], "window_pruned")
        pairs = evidence.matched_outcomes([row, other], "window_pairs")
        if matched is None or pairs is None or matched[0].shape[-1] < 2 or not evidence.same_seeds(
                [row, other], matched):
            return _exact(float(row["value"]) - float(other["value"]),
                          evidence.no_interval([row, other], "window_pruned", "per-window counts"))
        return statistics.share_difference(matched[0], pairs[0], matched[1], pairs[1])

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        found = {(row["settings"]["text"], row["settings"]["kind"]): row
                 for row in rows_of(self.method, rows, "value")}
        texts = sorted({text for text, _ in found})
        if not texts:
            return _not_run(Row(self.method, None, (("kind", "any"), ("text", "any"))))
        tests = [(text, kind) for text in texts for kind in self.first]
        missing = [(text, kind) for text, kind in tests + [(t, self.other) for t in texts] if (text, kind) not in found]
        if missing:
            return _not_run(*[Row(self.method, None, (("kind", kind), ("text", text))) for text, kind in missing])
        region = Region(low=0.0, strict=True, reason=f"'dropped first': a larger share of the kind's pairs pruned than "
                                                     f"of {self.other} tokens'")
        parts = []
        for text, kind in tests:
            mine, other = found[text, kind], found[text, self.other]
            parts.append((f"{text}: {kind}", judged(region, self._difference(mine, other, evidence), None,
                                                    f"{float(mine['value']):.1f}% vs {self.other} "
                                                    f"{float(other['value']):.1f}% pruned", "+.2f")))
        parts.sort(key=lambda part: part[1].ours)
        held = sum(v.status == "reproduced" for _, v in parts)
        return _from_parts(parts, region=f"every part: kind minus {self.other}, points {region.text()}",
                           prefix=f"{held} of {len(parts)} (text, kind) parts pruned more than {self.other} tokens, "
                                  f"the smallest difference first: ")


@dataclass(frozen=True)
class NotYet(Claim):
    """A claim no row of this package measures; ``reason`` says what is missing."""

    reason: str = ""

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        return Verdict("not run", None, None, self.reason)
