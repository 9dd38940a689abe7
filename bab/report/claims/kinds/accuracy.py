"""Kinds of claim on accuracy held, lost or beaten: a retention or a margin (``Accuracy``, built by ``retention``
and ``margin``), a claim with parts (``Parts``), seeds that collapse (``SeedCollapse``), a margin over a per-seed
method (``BeatsOverSeeds``) and a frontier that dominates a baseline's points (``Dominates``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core import statistics
from bab.core.statistics import Interval
from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence, _exact, _seeds_text
from bab.report.claims.kinds.base import Claim
from bab.report.claims.verdicts import (
    EPSILON,
    Region,
    Row,
    Verdict,
    _from_parts,
    _not_run,
    _same_budget,
    _value,
    beats,
    dense_of,
    judged,
    rows_of,
)


@dataclass(frozen=True)
class Accuracy(Claim):
    """A combination of accuracies, sum(coefficient x accuracy) over ``terms``, in points: a retention
    ((method, 1), (own dense, -1)), a margin ((better, 1), (worse, -1)), or a share of a loss recovered. Judged by
    its interval against ``region``. The paper's value is the same combination of its rows (``theirs_terms``
    where the paper's rows differ, e.g. our recipe's row against the paper's recipe's), or ``theirs``.
    ``baseline``: the same combination with a weaker method in place of the first term (e.g. post-hoc pruning);
    when it lands in the region too, the task cannot tell the method from it and the claim is not informative."""

    terms: tuple = ()  # ((Row, coefficient), ...)
    region: Region = None
    theirs_terms: tuple = ()
    theirs: float | None = None
    baseline: Row | None = None
    # the most the method can be asked to reach (its own dense model) in place of the first term: when that lands
    # outside the region too, no pruned model could meet the claim here and it is not informative
    ceiling: Row | None = None
    not_comparable: str = ""  # why our rows cannot test the claim (shown with our number)

    def paper_value(self) -> float | None:
        if self.theirs is not None:
            return self.theirs
        try:
            return sum(c * float(p.paper()["accuracy"]) for p, c in (self.theirs_terms or self.terms))
        except KeyError:
            return None

    def describe(self) -> str:
        parts = []
        for i, (p, c) in enumerate(self.terms):
            sign = "-" if c < 0 else ("+" if i else "")
            scale = "" if abs(c) == 1 else f"{abs(c):g} x "
            parts.append(f"{sign} {scale}{p.label()}".strip())
        return " ".join(parts)

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        matched = [p.find(rows) for p, _ in self.terms]
        missing = [p for (p, _), m in zip(self.terms, matched, strict=True) if _value(m, "accuracy") is None]
        if missing:
            return _not_run(*missing)
        value = sum(c * float(m["accuracy"]) for (_, c), m in zip(self.terms, matched, strict=True))
        interval = evidence.accuracy_combination(self.terms, rows) or _exact(
            value, "no interval: the test-set size of these rows is unknown")
        theirs = self.paper_value()
        paper_text = "" if theirs is None else f" vs the paper's {theirs:+.2f}"
        why = f"{self.describe()}{_seeds_text(matched)}: {interval.text()}{paper_text} points"
        verdict = judged(self.region, interval, theirs, why)
        if self.not_comparable:
            return replace(verdict, status="not comparable", why=f"{why}: {self.not_comparable}")
        if self.ceiling is not None and verdict.status != "reproduced":
            top = _combination(((self.ceiling, self.terms[0][1]), *self.terms[1:]), rows)
            if top is not None and not self.region.contains(top):
                return replace(verdict, status="not informative", why=f"{verdict.why}; but even "
                               f"{self.ceiling.label()} in its place gives {top:+.2f}, outside the region: on "
                               f"these rows no pruned model could meet the claim")
        if self.baseline is not None and verdict.status == "reproduced":
            weaker = ((self.baseline, self.terms[0][1]), *self.terms[1:])
            other = _combination(weaker, rows)
            if other is not None:
                other = evidence.accuracy_combination(weaker, rows) or _exact(other, "")
                if self.region.decide(other) != "not reproduced":  # the weaker method is not shown to fail
                    return replace(verdict, status="not informative", why=f"{verdict.why}; but "
                                   f"{self.baseline.label()} gives {other.text()} and is not shown to fall outside "
                                   f"the region either: on this task the claim cannot tell the method from it")
        return verdict


def _combination(terms, rows) -> float | None:
    """sum(coefficient x accuracy) of ``terms`` ((Row, coefficient) pairs) on ``rows``; None where a row is missing."""
    found = [p.find(rows) for p, _ in terms]
    if any(_value(m, "accuracy") is None for m in found):
        return None
    return sum(c * float(m["accuracy"]) for (_, c), m in zip(terms, found, strict=True))


def retention(id, paper, where, statement, row: Row, region: Region, *, reference: Row | None = None,
              theirs_row: Row | None = None, metric: str = "accuracy minus own dense, points", **fields) -> Accuracy:
    """``row``'s accuracy minus its reference's (its own dense model by default), ours against the paper's."""
    reference = reference or dense_of(row.method)
    theirs_terms = ((theirs_row, 1), (reference, -1)) if theirs_row is not None else ()
    return Accuracy(id, paper, where, statement, metric, terms=((row, 1), (reference, -1)), region=region,
                    theirs_terms=theirs_terms, **fields)


def margin(id, paper, where, statement, better: Row, worse: Row, region: Region | None = None, *,
           metric: str = "accuracy margin, points", **fields) -> Accuracy:
    """``better``'s accuracy minus ``worse``'s: "beats" unless another region is given."""
    return Accuracy(id, paper, where, statement, metric, terms=((better, 1), (worse, -1)),
                    region=region or beats(), **fields)


@dataclass(frozen=True)
class Parts(Claim):
    """A claim with parts, each a claim of its own: reproduced when every part is, not reproduced when none is and
    at least one is not, partly when some are and some are not (each named), else the parts' weakest verdict."""

    parts: tuple = ()  # ((name, Claim), ...)
    beside: tuple = ()  # ((name, Claim), ...) judged and shown for context, not counted in the verdict

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        verdict = _from_parts([(name, part.judge(rows, evidence)) for name, part in self.parts])
        shown = [(name, part.judge(rows, evidence)) for name, part in self.beside]
        return replace(verdict, why=verdict.why + "".join(f"; beside it, {name}: {v.why.split('; holds if')[0]}"
                                                         for name, v in shown))


@dataclass(frozen=True)
class SeedCollapse(Claim):
    """Some seeds of ``method`` (a per-seed method: rows told apart by a ``seed`` setting, at ``budget``) collapse
    and others do not. A seed collapses when its accuracy keeps less than half of its own dense model's margin over
    ``chance``. The share of seeds that collapse, with its Wilson interval over the seeds run, must lie strictly
    between 0 and 1. With no seed collapsed the interval touches 0 however many seeds ran (a rare collapse can never
    be ruled out), so the verdict stays inconclusive and the line gives the interval's upper end."""

    method: Method = None
    budget: float = 0.5
    chance: float = 50.0  # accuracy of a constant guess, in %
    theirs: tuple[int, int] = (0, 0)

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        dense_row = dense_of(self.method)
        dense = _value(dense_row.find(rows), "accuracy")
        seeds = {row["settings"]["seed"]: float(row["accuracy"]) for row in rows_of(self.method, rows, "accuracy")
                 if _same_budget(row.get("budget"), self.budget)}
        if dense is None or not seeds:
            return _not_run(*([dense_row] if dense is None else []),
                            *([] if seeds else [Row(self.method, self.budget, (("seed", "any"),))]))
        threshold = (self.chance + dense) / 2
        collapsed = sorted(seed for seed, accuracy in seeds.items() if accuracy < threshold)
        share = len(collapsed) / len(seeds)
        low, high = statistics.proportion_interval(len(collapsed), len(seeds))
        interval = Interval(share, min(low, share), max(high, share), f"{len(seeds)} training seeds (Wilson)")
        region = Region(low=0.0, high=1.0, strict=True, reason="seed-sensitive: some seeds collapse, not all")
        accuracies = ", ".join(f"seed {seed}: {accuracy:.1f}" for seed, accuracy in sorted(seeds.items()))
        return judged(region, interval, self.theirs[0] / self.theirs[1] if self.theirs[1] else None,
                      f"{len(collapsed)} of {len(seeds)} seeds collapsed (paper: {self.theirs[0]} of "
                      f"{self.theirs[1]}); collapsed = below {threshold:.1f}%, half way from chance to our dense "
                      f"{dense:.1f}% ({accuracies}); share {interval.text('.2f')}", ".2f")


@dataclass(frozen=True)
class BeatsOverSeeds(Claim):
    """``better``'s accuracy minus the mean of ``worse``'s per-seed models (a per-seed method: rows told apart by a
    ``seed`` setting, at ``better``'s budget), against ``region``. Both sides are trained at several seeds and not
    paired seed by seed, so the interval resamples each side's seeds (``statistics.group_difference``)."""

    better: Row = None
    worse: Method = None
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        found = self.better.find(rows)
        worse = [row for row in rows_of(self.worse, rows, "accuracy")
                 if _same_budget(row.get("budget"), self.better.budget)]
        if _value(found, "accuracy") is None or not worse:
            return _not_run(*([self.better] if _value(found, "accuracy") is None else []),
                            *([] if worse else [Row(self.worse, self.better.budget, (("seed", "any"),))]))
        by_seed = evidence.per_seed([self.better])
        better = [matched[0] for matched in by_seed.values()] if by_seed else [found]
        sizes = [evidence.examples(row) for row in better + worse]
        if None in sizes:
            return _not_run(self.better)
        n = min(sizes)

        def error(row):
            p = float(row["accuracy"]) / 100
            return 100 * (max(p * (1 - p), 0.25 / n) / n) ** 0.5

        interval = statistics.group_difference([float(r["accuracy"]) for r in better], [error(r) for r in better],
                                               [float(r["accuracy"]) for r in worse], [error(r) for r in worse], n)
        scratch = ", ".join(f"seed {r['settings']['seed']}: {float(r['accuracy']):.1f}" for r in worse)
        return judged(self.region, interval, None, f"{self.better.label()} minus the mean of {self.worse.name} "
                      f"({scratch}): {interval.text()} points")


@dataclass(frozen=True)
class Dominates(Claim):
    """A frontier dominates a baseline's points: for each of ``points`` (e.g. EViT at two token keep rates), the most
    accurate row of ``frontier`` (e.g. Sparsifiner's keep-rate sweep) at no more cost, minus the point's accuracy,
    lies in ``region``. A claim with parts, one per point, each judged by its interval."""

    frontier: Method = None
    points: tuple[Row, ...] = ()
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        curve = [r for r in rows_of(self.frontier, rows, "accuracy", "cost") if not r.get("settings")]
        missing = [p for p in self.points if _value(p.find(rows), "accuracy") is None]
        if missing or not curve:
            return _not_run(*missing, *([] if curve else [Row(self.frontier, None)]))
        parts = []
        for point in self.points:
            found = point.find(rows)
            cheaper = [r for r in curve if float(r["cost"]) <= float(found["cost"]) + EPSILON]
            if not cheaper:
                parts.append((point.label(), Verdict("not reproduced", None, None, f"no {self.frontier.name} row "
                                                     f"costs at most {point.label()}'s {found['cost']:.3f}")))
                continue
            best = max(cheaper, key=lambda r: float(r["accuracy"]))
            part = margin(self.id, self.paper, "", "", better=Row(self.frontier, best["budget"]), worse=point,
                          region=self.region)
            parts.append((f"{point.label()} vs {self.frontier.name} @{best['budget']:g}", part.judge(rows, evidence)))
        return _from_parts(parts, self.region.text())
