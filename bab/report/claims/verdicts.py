"""What a claim's verdict is made of: the verdicts, regions our number must lie in, row pointers."""

from __future__ import annotations

from dataclasses import dataclass

from bab.core.statistics import Interval
from bab.experiments.methods import Method, registry, settings_text
from bab.report.results import paper as paper_numbers

VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "not testable", "not informative",
            "not comparable", "not run")
# the verdicts that say the claim holds or not: from fewer training seeds than this they are only indicative
DECIDING = ("reproduced", "partly", "not reproduced")
SEEDS_TO_DECIDE = 3
PAPERS = ("budgeted attention", "dynamic context pruning", "sparsifiner")
# "paper": the claim is tested with the paper's recipe (its unpublished knobs ours); "ours": what this package's
# own recipe adds, counted apart and never in the paper's count
RECIPES = ("paper", "ours")

# Two numbers closer than this (relative to the boundary, at least absolute) are equal: a verdict never turns on
# floating-point noise such as a shortfall of 1.0000000000000142 against a margin of 1.
EPSILON = 1e-9


# ----------------------------------------------------------------------------- regions and verdicts


@dataclass(frozen=True)
class Region:
    """Where our number must lie for the claim to hold: between ``low`` and ``high`` (None: unbounded), both ends
    exclusive when ``strict`` ("beats": > 0). ``reason``: why these bounds, from the paper's wording."""

    low: float | None = None
    high: float | None = None
    strict: bool = False
    reason: str = ""

    def __post_init__(self):
        if self.low is None and self.high is None:
            raise ValueError("a region needs a low or a high bound")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"region low {self.low} is above its high {self.high}")

    def text(self, spec: str = "+.2f") -> str:
        """'> +0.00', '>= -1.00', '<= 0.06', '-3.00 to -1.00'."""
        if self.low is not None and self.high is not None:
            return f"{self.low:{spec}} to {self.high:{spec}}" + (" (exclusive)" if self.strict else "")
        if self.low is not None:
            return f"{'>' if self.strict else '>='} {self.low:{spec}}"
        return f"{'<' if self.strict else '<='} {self.high:{spec}}"

    def _inside_low(self, x: float) -> bool:
        if self.low is None:
            return True
        tolerance = EPSILON * max(1.0, abs(self.low))
        return x > self.low + tolerance if self.strict else x >= self.low - tolerance

    def _inside_high(self, x: float) -> bool:
        if self.high is None:
            return True
        tolerance = EPSILON * max(1.0, abs(self.high))
        return x < self.high - tolerance if self.strict else x <= self.high + tolerance

    def contains(self, x: float) -> bool:
        return self._inside_low(x) and self._inside_high(x)

    def width(self) -> float | None:
        """How wide the region is, or None when it is open on a side."""
        return None if self.low is None or self.high is None else self.high - self.low

    def decide(self, interval: Interval) -> str:
        """reproduced when all of ``interval`` is inside, not reproduced when none of it is; not testable when it
        straddles a region narrower than itself (no interval this wide can ever lie inside); else inconclusive."""
        if self.contains(interval.low) and self.contains(interval.high):
            return "reproduced"
        below = self.low is not None and not self._inside_low(interval.high)
        above = self.high is not None and not self._inside_high(interval.low)
        if below or above:
            return "not reproduced"
        width = self.width()
        if width is not None and interval.high - interval.low > width:
            return "not testable"
        return "inconclusive"


def keeps(delta: float, reason: str) -> Region:
    """"Keeps (dense) accuracy": retention >= -delta."""
    return Region(low=-delta, reason=reason)


def about(value: float, delta: float, reason: str) -> Region:
    """"About ``value``": within value +- delta."""
    return Region(low=value - delta, high=value + delta, reason=reason)


def beats(reason: str = "the paper's claim is only the sign: a margin above 0") -> Region:
    return Region(low=0.0, strict=True, reason=reason)


def loses(reason: str) -> Region:
    return Region(high=0.0, strict=True, reason=reason)


def at_least(value: float, reason: str) -> Region:
    return Region(low=value, reason=reason)


def at_most(value: float, reason: str) -> Region:
    return Region(high=value, reason=reason)


@dataclass(frozen=True)
class Verdict:
    status: str  # one of VERDICTS
    ours: float | None  # our value of the claim's metric (None: not measured)
    theirs: float | None  # the paper's value of the same metric
    why: str  # one line a reader can check against the rows
    low: float | None = None  # our value's 95% interval
    high: float | None = None
    region: str = ""  # where our value must lie for the claim to hold, in words
    covers: str = ""  # what the interval covers ("3 seeds x 2,000 test examples, paired")
    decided_by: str = ""  # the part whose number is shown, for a claim with parts: the one that decides it
    # the training seeds of the rows it was judged on, where fewer than its experiments ran (a model that only some
    # seeds' runs made, e.g. at a budget each seed calibrates for itself); None: as many as they ran
    seeds: int | None = None


def judged(region: Region, interval: Interval, theirs: float | None, why: str, spec: str = "+.2f") -> Verdict:
    """The verdict of ``interval`` against ``region``, with the interval, region and reason spelled out."""
    status = region.decide(interval)
    line = f"{why}; holds if {region.text(spec)} ({region.reason})"
    if status == "inconclusive":
        line += "; the interval straddles the boundary: more seeds or test examples would decide it"
    elif status == "not testable":
        factor = ((interval.high - interval.low) / region.width()) ** 2
        line += (f"; not testable here: the region is {region.width():.2g} wide and the interval "
                 f"{interval.high - interval.low:.2g}, so no result on these test examples could lie inside it "
                 f"(about {factor:.1f}x as many test examples would give an interval that fits)")
    return Verdict(status, interval.value, theirs, line, interval.low, interval.high, region.text(spec),
                   interval.covers)


# ----------------------------------------------------------------------------- row pointers


@dataclass(frozen=True)
class Row:
    """A typed pointer at one result row: a declared method at a budget, with its settings."""

    method: Method
    budget: float | None = None
    settings: tuple = ()  # (key, value) pairs

    def find(self, rows) -> dict | None:
        """Our row this points at (the experiment's and the method's own), or None."""
        return _find(rows, self.method.experiment, self.method.name, self.budget, dict(self.settings))

    def paper(self) -> dict:
        """The paper's row for the same method, budget and settings (KeyError naming it when there is none)."""
        experiment = paper_numbers.COUNTERPARTS.get(self.method.experiment, self.method.experiment)
        found = _find(paper_numbers.PAPER_RESULTS, experiment, self.method.name, self.budget, dict(self.settings))
        if found is None:
            raise KeyError(f"no paper row for {experiment} / {self.method.name} / {self.budget}")
        return found

    def label(self) -> str:
        budget = "" if self.budget is None else f" @{self.budget:g}"
        settings = settings_text(dict(self.settings))
        return f"{self.method.name}{budget}" + (f" ({settings})" if settings else "")


def _find(rows, experiment, method, budget, settings) -> dict | None:
    return next((row for row in rows if row.get("experiment") == experiment and row.get("method") == method
                 and _same_budget(row.get("budget"), budget) and (row.get("settings") or {}) == settings), None)


def rows_of(method: Method, rows, *present: str) -> list[dict]:
    """``method``'s rows among ``rows`` (its experiment's and its name's) that have a value in each of ``present``."""
    return [row for row in rows if row.get("experiment") == method.experiment and row.get("method") == method.name
            and all(row.get(column) is not None for column in present)]


def _same_budget(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(float(a) - float(b)) < 1e-6)


def dense_of(method: Method) -> Row:
    """The dense reference row of ``method``'s experiment."""
    return Row(registry()[method.experiment]["dense"], 1.0)


def _value(row: dict | None, metric: str) -> float | None:
    return None if row is None or row.get(metric) is None else float(row[metric])


def _not_run(*missing: Row) -> Verdict:
    return Verdict("not run", None, None, "no row of ours: " + "; ".join(
        f"{r.method.experiment} / {r.label()}" for r in missing))


def _from_parts(parts, region: str | None = None, prefix: str = "") -> Verdict:
    """The verdict of a claim with named ``parts`` ((name, Verdict) pairs): their combined status (``_combine``),
    each part named with its own verdict and why, and the number and interval of the part that decides it (the
    first part with the combined status; for "partly", the first part that is not reproduced)."""
    status = _combine([v for _, v in parts])
    wanted = "not reproduced" if status == "partly" else status
    name, deciding = next(((n, v) for n, v in parts if v.status == wanted), parts[0])
    if deciding.ours is None and status != "not run":  # a claim waiting for a row shows no number of its parts
        name, deciding = next(((n, v) for n, v in parts if v.ours is not None), (name, deciding))
    regions = region if region is not None else "; ".join(f"{name}: {v.region}" for name, v in parts if v.region)
    return Verdict(status, deciding.ours, deciding.theirs,
                   prefix + "; ".join(f"{name}: {v.status} ({v.why})" for name, v in parts),
                   deciding.low, deciding.high, regions, deciding.covers, decided_by=name)


def _combine(verdicts: list[Verdict]) -> str:
    """The verdict of a claim whose parts got ``verdicts`` (the rule of ``Parts``)."""
    statuses = [v.status for v in verdicts]
    if all(s == "reproduced" for s in statuses):
        return "reproduced"
    if "not run" in statuses:
        return "not run"
    if ("reproduced" in statuses and "not reproduced" in statuses) or "partly" in statuses:
        return "partly"
    if "not reproduced" in statuses:
        return "not reproduced"
    for status in ("inconclusive", "not testable", "not informative", "not comparable"):
        if status in statuses:
            return status
    return statuses[0]
