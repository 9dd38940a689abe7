"""The kinds of claim: accuracy retention and margins, claims with parts, cost, speed, memory, perplexity."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core import statistics
from bab.core.statistics import Interval
from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence, _exact, _seeds_text
from bab.report.claims.verdicts import (
    PAPERS,
    RECIPES,
    Region,
    Row,
    Verdict,
    _from_parts,
    _not_run,
    _same_budget,
    _value,
    at_least,
    at_most,
    beats,
    dense_of,
    judged,
    rows_of,
)

# ----------------------------------------------------------------------------- claim kinds


@dataclass(frozen=True)
class Claim:
    """One headline claim: where the paper makes it, the sentence, the metric compared, whose recipe it tests and
    the setting that differs from the paper's (one column on the front page)."""

    id: str
    paper: str  # one of PAPERS
    where: str  # table, figure or section
    statement: str
    metric: str  # what the numbers in the verdict are, in words
    setup: str = ""  # how the recipe differs from the paper's, when it matters for the verdict
    # a method whose row's note says how the rows were trained, where that depends on the profile (the decoder
    # study freezes its weights at quick and fine-tunes them at paper): appended to ``setup``
    protocol_from: Method | None = None
    recipe: str = "paper"  # one of RECIPES
    setting: str = ""  # the model, data or hardware that differs from the paper's

    def __post_init__(self):
        if self.recipe not in RECIPES:
            raise ValueError(f"claim {self.id}: recipe must be one of {RECIPES}, got {self.recipe!r}")
        if self.paper not in PAPERS:
            raise ValueError(f"claim {self.id}: paper must be one of {PAPERS}, got {self.paper!r}")

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        raise NotImplementedError

    def experiments(self) -> set[str]:
        """The experiments whose rows this claim reads (every Row and Method among its fields)."""
        found = set()

        def visit(item):
            if isinstance(item, tuple):  # (Row, coefficient) terms, (name, Claim) parts, tuples of rows
                for inner in item:
                    visit(inner)
            elif isinstance(item, Row):
                found.add(item.method.experiment)
            elif isinstance(item, Method):
                found.add(item.experiment)
            elif isinstance(item, Claim):
                found.update(item.experiments())

        for value in vars(self).values():
            visit(value)
        return found

    def setup_for(self, rows) -> str:
        """``setup``, with the note of ``protocol_from``'s first row among ``rows`` that has one appended."""
        notes = [row["note"] for row in rows if self.protocol_from is not None and row.get("note")
                 and row.get("experiment") == self.protocol_from.experiment
                 and row.get("method") == self.protocol_from.name]
        return "; ".join(part for part in (self.setup, notes[0] if notes else "") if part)


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
    Bytes are counted, not sampled: the number is exact for the model measured."""

    row: Row = None
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        found = self.row.find(rows)
        ours, kept = _value(found, "memory_ratio"), _value(found, "cost")
        if ours is None or not kept:
            return _not_run(self.row)
        implied = 1.0 / kept
        return judged(self.region, _exact(ours / implied, "exact: bytes counted"), None,
                      f"KV cache {ours:.2f}x smaller than dense, {ours / implied:.0%} of the {implied:.2f}x that "
                      f"{kept:.1%} of the context kept implies", ".2f")


@dataclass(frozen=True)
class PerplexityHeld(Claim):
    """Perplexity at the row over its dense reference's, against ``region``. ``references``: the dense rows to
    divide by, the first one present taken (a dense fine-tune of the same protocol before the untouched pretrained
    model: a fine-tune also adapts to the training text, which would read as a gain from pruning); by default the
    experiment's dense row."""

    row: Row = None
    region: Region = None
    references: tuple[Row, ...] = ()

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        references = self.references or (dense_of(self.row.method),)
        found = self.row.find(rows)
        reference = next((r for r in references if _value(r.find(rows), "perplexity") is not None), references[-1])
        dense = reference.find(rows)
        if _value(found, "perplexity") is None or _value(dense, "perplexity") is None:
            return _not_run(*[r for r, f in ((self.row, found), (reference, dense))
                              if _value(f, "perplexity") is None])
        ratio = _value(found, "perplexity") / _value(dense, "perplexity")
        kept = _value(found, "cost")
        at = "" if kept is None else f" with {1 - kept:.0%} of the context pruned"
        evidence = evidence or Evidence()
        interval = evidence.perplexity_ratio(found, dense) or _exact(ratio, evidence.no_interval(
            [found, dense], "window_nll", "per-window log-likelihoods"))
        return judged(self.region, interval, None, f"perplexity {ratio:.3f}x {reference.label()}{at}", ".3f")


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
