"""The papers' headline claims, each with a rule that judges it on our result rows.

A claim names where a paper makes it, says it in one sentence, and points at the rows that test it by typed
ids: our rows by the ``Method`` objects the experiments declare (``bab.experiments.methods``), the paper's by the
same objects in ``bab.report.paper``. Its rule is code (``judge(rows) -> Verdict``):

- accuracy claims compare *retention*: (ours - our dense) against (theirs - their dense), within a stated
  tolerance in points, never our accuracy level against the paper's (other models, other data);
- speed claims compare our measured ratio with the paper's and show our analytic limit beside it;
- a claim whose rows are missing is "not run", with the row it needs.

Verdicts: reproduced, partly, not reproduced, not comparable (with why), not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bab.experiments.bert import BERT_AG_NEWS_METHODS as BERT
from bab.experiments.bert import BERT_DBPEDIA_METHODS as DBPEDIA
from bab.experiments.context_pruning import GPT2_METHODS as GPT2
from bab.experiments.methods import Method, registry, settings_text
from bab.experiments.pretrained_context import PRETRAINED_METHODS as DECODER
from bab.experiments.pretrained_context import claim_verdict, zero_shot_held
from bab.experiments.synthetic import SYNTHETIC_METHODS as SYN
from bab.experiments.text import AG_NEWS_METHODS as AGN
from bab.experiments.vit import VIT_METHODS as VIT
from bab.report import paper as paper_numbers

VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "not informative", "not comparable", "not run")
PAPERS = ("budgeted attention", "dynamic context pruning", "sparsifiner")
# "paper": the claim is tested with the paper's recipe (its unpublished knobs ours); "ours": what this package's
# own recipe adds, counted apart and never in the paper's count
RECIPES = ("paper", "ours")


@dataclass(frozen=True)
class Verdict:
    status: str  # one of VERDICTS
    ours: float | None  # our value of the claim's metric (None: not measured)
    theirs: float | None  # the paper's value of the same metric
    why: str  # one line a reader can check against the rows


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
    for row in rows:
        if (row.get("experiment") == experiment and row.get("method") == method
                and _same_budget(row.get("budget"), budget) and (row.get("settings") or {}) == settings):
            return row
    return None


def _same_budget(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(float(a) - float(b)) < 1e-6)


def dense_of(method: Method) -> Row:
    """The dense reference row of ``method``'s experiment."""
    return Row(registry()[method.experiment]["dense"], 1.0)


def _value(row: dict | None, metric: str) -> float | None:
    return None if row is None or row.get(metric) is None else float(row[metric])


def _seeds(row: dict | None) -> str:
    """" (mean of seeds 7/13/21, std 1.2)" for a row over several seeds, " (seed 13)" for one, "" when unknown."""
    seeds = (row or {}).get("seeds") or []
    if len(seeds) > 1:
        std = row.get("accuracy_std")
        return f" (mean of seeds {'/'.join(map(str, seeds))}" + ("" if std is None else f", std {std:.2f}") + ")"
    return f" (seed {seeds[0]})" if seeds else ""


def _not_run(*missing: Row) -> Verdict:
    return Verdict("not run", None, None, "no row of ours: " + "; ".join(
        f"{r.method.experiment} / {r.label()}" for r in missing))


def _graded(ours: float, theirs: float, tolerance: float, higher_is_better: bool = True) -> str:
    """reproduced within ``tolerance`` of the paper (or better), partly within twice it, else not reproduced."""
    shortfall = (theirs - ours) if higher_is_better else (ours - theirs)
    if shortfall <= tolerance:
        return "reproduced"
    return "partly" if shortfall <= 2 * tolerance else "not reproduced"


# ----------------------------------------------------------------------------- claim kinds


@dataclass(frozen=True)
class Claim:
    """One headline claim: where the paper makes it, the sentence, and the metric compared."""

    id: str
    paper: str  # one of PAPERS
    where: str  # table, figure or section
    statement: str
    metric: str  # what the numbers in the verdict are, in words
    setup: str = ""  # what differs between the paper's setup and ours, when it matters for the verdict
    # a method whose row's note says how the rows were trained, where that depends on the profile (the decoder
    # study freezes its weights at quick and fine-tunes them at paper): appended to ``setup``
    protocol_from: Method | None = None

    def judge(self, rows) -> Verdict:
        raise NotImplementedError

    def experiments(self) -> set[str]:
        """The experiments whose rows this claim reads (every Row and Method among its fields)."""
        found = set()
        for value in vars(self).values():
            for item in (value if isinstance(value, tuple) else (value,)):
                if isinstance(item, Row):
                    found.add(item.method.experiment)
                elif isinstance(item, Method):
                    found.add(item.experiment)
        return found

    def setup_for(self, rows) -> str:
        """``setup``, with the note of ``protocol_from``'s first row among ``rows`` that has one appended."""
        notes = [row["note"] for row in rows if self.protocol_from is not None and row.get("note")
                 and row.get("experiment") == self.protocol_from.experiment
                 and row.get("method") == self.protocol_from.name]
        return "; ".join(part for part in (self.setup, notes[0] if notes else "") if part)


@dataclass(frozen=True)
class Retention(Claim):
    """``row``'s accuracy minus its own dense model's, ours against the paper's, within ``tolerance`` points.
    ``reference``: the row to subtract instead of dense (e.g. EViT alone, for EViT + Sparsifiner)."""


    row: Row = None
    reference: Row | None = None
    tolerance: float = 1.0
    theirs: Row | None = None  # the paper's row when ``row`` is this package's recipe of the same method

    def judge(self, rows) -> Verdict:
        reference = self.reference or dense_of(self.row.method)
        ours_row, ours_reference = self.row.find(rows), reference.find(rows)
        theirs = (self.theirs or self.row).paper()["accuracy"] - reference.paper()["accuracy"]
        missing = [r for r, found in ((self.row, ours_row), (reference, ours_reference))
                   if _value(found, "accuracy") is None]
        if missing:
            return _not_run(*missing)
        ours = _value(ours_row, "accuracy") - _value(ours_reference, "accuracy")
        status = _graded(ours, theirs, self.tolerance)
        return Verdict(status, ours, theirs, f"{ours:+.2f}{_seeds(ours_row)} vs {theirs:+.2f} points against "
                       f"{reference.label()}{_seeds(ours_reference)}; tolerance {self.tolerance:g}")


@dataclass(frozen=True)
class Margin(Claim):
    """``better`` beats ``worse`` in accuracy: reproduced when our margin is positive and within ``tolerance``
    points of the paper's (or larger), partly when positive but smaller, not reproduced otherwise."""

    better: Row = None
    worse: Row = None
    tolerance: float = 1.0
    theirs_better: float | None = None  # the paper's accuracy for ``better`` when it has no row of the same key

    def judge(self, rows) -> Verdict:
        matched = {r: r.find(rows) for r in (self.better, self.worse)}
        found = {r: _value(row, "accuracy") for r, row in matched.items()}
        if None in found.values():
            return _not_run(*[r for r, v in found.items() if v is None])
        ours = found[self.better] - found[self.worse]
        better = self.better.paper()["accuracy"] if self.theirs_better is None else self.theirs_better
        theirs = better - self.worse.paper()["accuracy"]
        if ours <= 0:
            status = "not reproduced"
        else:
            status = "reproduced" if ours >= theirs - self.tolerance else "partly"
        return Verdict(status, ours, theirs, f"{self.better.label()}{_seeds(matched[self.better])} minus "
                       f"{self.worse.label()}{_seeds(matched[self.worse])}: {ours:+.2f} vs {theirs:+.2f} points; "
                       f"tolerance {self.tolerance:g}")


@dataclass(frozen=True)
class CostTracks(Claim):
    """The soft cost of each row is within ``tolerance`` of its requested budget (the largest miss is judged)."""

    rows: tuple[Row, ...] = ()
    tolerance: float = 0.06
    theirs: tuple[Row, ...] = ()  # the paper's rows when ``rows`` are this package's recipe

    def judge(self, rows) -> Verdict:
        found = {r: _value(r.find(rows), "cost") for r in self.rows}
        if None in found.values():
            return _not_run(*[r for r, v in found.items() if v is None])
        ours = max(abs(cost - r.budget) for r, cost in found.items())
        theirs = max(abs(r.paper()["cost"] - r.budget) for r in (self.theirs or self.rows))
        status = "reproduced" if ours <= self.tolerance else ("partly" if ours <= 2 * self.tolerance
                                                              else "not reproduced")
        costs = ", ".join(f"{cost:.3f} @{r.budget:g}" for r, cost in found.items())
        return Verdict(status, ours, theirs, f"largest |cost - b| {ours:.3f} (paper {theirs:.3f}): {costs}; "
                       f"tolerance {self.tolerance:g}")


@dataclass(frozen=True)
class Speed(Claim):
    """A measured speed-up, ours against the paper's: reproduced at ``share`` of the paper's ratio or more,
    partly when faster than dense but less, not reproduced when not faster. Our analytic limit is shown."""

    row: Row = None
    share: float = 0.9
    theirs: Row | None = None  # the paper's row when ``row`` is this package's recipe

    def judge(self, rows) -> Verdict:
        found = self.row.find(rows)
        ours = _value(found, "speedup")
        if ours is None:
            return _not_run(self.row)
        theirs = (self.theirs or self.row).paper()["speedup"]
        limit = _value(found, "analytic_limit")
        status = ("reproduced" if ours >= self.share * theirs else "partly" if ours > 1.0 else "not reproduced")
        beside = "" if limit is None else f", analytic limit {limit:.2f}x"
        return Verdict(status, ours, theirs, f"{ours:.2f}x measured vs the paper's {theirs:.2f}x{beside}")


@dataclass(frozen=True)
class MemoryFollowsPruning(Claim):
    """Dropped tokens leave the KV cache, so the cache shrinks as the context does. The paper gives no number;
    the rule compares the row's measured memory ratio (dense cache bytes / ours) with the one its fraction of
    context kept implies, 1 / cost: reproduced at ``share`` of it or more, partly when the cache is smaller than
    dense but by less, not reproduced when it is not smaller."""

    row: Row = None
    share: float = 0.8

    def judge(self, rows) -> Verdict:
        found = self.row.find(rows)
        ours, kept = _value(found, "memory_ratio"), _value(found, "cost")
        if ours is None or not kept:
            return _not_run(self.row)
        implied = 1.0 / kept
        status = "reproduced" if ours >= self.share * implied else "partly" if ours > 1.0 else "not reproduced"
        return Verdict(status, ours, None, f"KV cache {ours:.2f}x smaller than dense; {kept:.1%} of the context "
                       f"kept implies {implied:.2f}x (reproduced from {self.share:.0%} of it); the paper gives no "
                       f"number")


@dataclass(frozen=True)
class CostAtMost(Claim):
    """Our cost (e.g. the MHSA FLOP fraction) is at most the paper's plus ``tolerance``."""

    row: Row = None
    tolerance: float = 0.05

    def judge(self, rows) -> Verdict:
        ours = _value(self.row.find(rows), "cost")
        if ours is None:
            return _not_run(self.row)
        theirs = self.row.paper()["cost"]
        return Verdict(_graded(ours, theirs, self.tolerance, higher_is_better=False), ours, theirs,
                       f"cost {ours:.3f} vs the paper's {theirs:.3f} of dense; tolerance {self.tolerance:g}")


@dataclass(frozen=True)
class PerplexityHeld(Claim):
    """Perplexity at the row over the dense model's: reproduced up to ``significant`` (the paper's
    "without significant degradation", which it gives no number for), partly up to ``partly``. ``references``:
    the dense rows to divide by, the first one present taken (a dense fine-tune of the same protocol before the
    untouched pretrained model: a fine-tune also adapts to the training text, which would read as a gain from
    pruning); by default the experiment's dense row."""

    row: Row = None
    significant: float = 1.10
    partly: float = 1.50
    references: tuple[Row, ...] = ()

    def judge(self, rows) -> Verdict:
        references = self.references or (dense_of(self.row.method),)
        found = self.row.find(rows)
        reference = next((r for r in references if _value(r.find(rows), "perplexity") is not None), references[-1])
        dense = reference.find(rows)
        if _value(found, "perplexity") is None or _value(dense, "perplexity") is None:
            return _not_run(*[r for r, f in ((self.row, found), (reference, dense))
                              if _value(f, "perplexity") is None])
        ratio = _value(found, "perplexity") / _value(dense, "perplexity")
        status = "reproduced" if ratio <= self.significant else ("partly" if ratio <= self.partly
                                                                 else "not reproduced")
        kept = _value(found, "cost")
        at = "" if kept is None else f" with {1 - kept:.0%} of the context pruned"
        return Verdict(status, ratio, None, f"perplexity {ratio:.2f}x {reference.label()}{at}; 'significant' "
                       f"taken as > {self.significant:g}x")


@dataclass(frozen=True)
class SeedCollapse(Claim):
    """Some seeds of ``method`` (a per-seed method: rows told apart by a ``seed`` setting, at ``budget``) collapse
    and others do not. A seed collapses when its accuracy keeps less than half of its own dense model's margin over
    ``chance``. Reproduced when some but not all seeds collapse (seed-sensitive, as the paper found: ``theirs`` =
    (collapsed, seeds)), partly when every seed collapses, not reproduced when none does."""

    method: Method = None
    budget: float = 0.5
    chance: float = 50.0  # accuracy of a constant guess, in %
    theirs: tuple[int, int] = (0, 0)

    def judge(self, rows) -> Verdict:
        dense_row = dense_of(self.method)
        dense = _value(dense_row.find(rows), "accuracy")
        seeds = {row["settings"]["seed"]: float(row["accuracy"]) for row in rows
                 if row.get("experiment") == self.method.experiment and row.get("method") == self.method.name
                 and _same_budget(row.get("budget"), self.budget) and row.get("accuracy") is not None}
        if dense is None or not seeds:
            return _not_run(*([dense_row] if dense is None else []),
                            *([] if seeds else [Row(self.method, self.budget, (("seed", "any"),))]))
        threshold = (self.chance + dense) / 2
        collapsed = sorted(seed for seed, accuracy in seeds.items() if accuracy < threshold)
        status = ("reproduced" if 0 < len(collapsed) < len(seeds) else "partly" if collapsed
                  else "not reproduced")
        accuracies = ", ".join(f"seed {seed}: {accuracy:.1f}" for seed, accuracy in sorted(seeds.items()))
        return Verdict(status, float(len(collapsed)), float(self.theirs[0]),
                       f"{len(collapsed)} of {len(seeds)} seeds collapsed (paper: {self.theirs[0]} of "
                       f"{self.theirs[1]}); collapsed = below {threshold:.1f}%, half way from chance to our dense "
                       f"{dense:.1f}% ({accuracies})")


@dataclass(frozen=True)
class Statistic(Claim):
    """A method's one number (its ``value``), ours against the paper's: reproduced within ``tolerance``, partly
    within twice it, else not reproduced. ``not_comparable``: why our number cannot test the claim (the verdict
    says so and shows both numbers)."""

    row: Row = None
    tolerance: float = 0.05
    not_comparable: str = ""
    beside: tuple[Row, ...] = ()  # rows of ours shown in the verdict's line, not judged

    def judge(self, rows) -> Verdict:
        ours = _value(self.row.find(rows), "value")
        if ours is None:
            return _not_run(self.row)
        theirs = self.row.paper()["value"]
        shown = [f"{r.label()}: {_value(r.find(rows), 'value'):.3g}" for r in self.beside
                 if _value(r.find(rows), "value") is not None]
        line = f"{ours:.3g} vs the paper's {theirs:.3g}" + (f" ({'; '.join(shown)})" if shown else "")
        if self.not_comparable:
            return Verdict("not comparable", ours, theirs, f"{line}: {self.not_comparable}")
        status = "reproduced" if abs(ours - theirs) <= self.tolerance else (
            "partly" if abs(ours - theirs) <= 2 * self.tolerance else "not reproduced")
        return Verdict(status, ours, theirs, f"{line}; tolerance {self.tolerance:g}")


@dataclass(frozen=True)
class KindsFirst(Claim):
    """``first`` kinds of tokens lose a larger share of their pairs than ``other`` on every held-out text of
    ``method``'s rows (settings ``kind``, ``text``): reproduced when every first kind beats ``other`` on every text,
    partly when some do, not reproduced when none does."""

    method: Method = None
    first: tuple[str, ...] = ("punctuation", "stop word")
    other: str = "other"

    def judge(self, rows) -> Verdict:
        share = {(row["settings"]["text"], row["settings"]["kind"]): float(row["value"]) for row in rows
                 if row.get("experiment") == self.method.experiment and row.get("method") == self.method.name
                 and row.get("value") is not None}
        texts = sorted({text for text, _ in share})
        if not texts:
            return _not_run(Row(self.method, None, (("kind", "any"), ("text", "any"))))
        tests = [(text, kind) for text in texts for kind in self.first]
        missing = [(text, kind) for text, kind in tests + [(t, self.other) for t in texts] if (text, kind) not in share]
        if missing:
            return _not_run(*[Row(self.method, None, (("kind", kind), ("text", text))) for text, kind in missing])
        held = [share[text, kind] > share[text, self.other] for text, kind in tests]
        status = "reproduced" if all(held) else ("partly" if any(held) else "not reproduced")
        lines = "; ".join(f"{text}: " + ", ".join(f"{kind} {share[text, kind]:.1f}%" for kind in
                                                   (*self.first, self.other)) for text in texts)
        return Verdict(status, float(sum(held)), float(len(tests)),
                       f"{sum(held)} of {len(tests)} (text, kind) pairs pruned more than {self.other} tokens: {lines}")


@dataclass(frozen=True)
class ZeroShotHeld(Claim):
    """Every zero-shot task of ``method``'s rows (settings ``task``, ``weights``, ``gamma``; gamma 0 the dense
    model) stays within the dense model's 95% interval at the ``target`` fraction pruned
    (``bab.experiments.pretrained_context.claim_verdict``): reproduced when it holds there (within 0.05), partly
    when it holds only at smaller fractions, not reproduced when no pruned model holds. Judged on the first of
    ``weights`` the rows have (the paper fine-tunes the weights; profile quick has only frozen ones)."""

    method: Method = None
    weights: tuple[str, ...] = ("fine-tuned", "frozen")
    target: float = 0.8

    def judge(self, rows) -> Verdict:
        mine = [row for row in rows if row.get("experiment") == self.method.experiment
                and row.get("method") == self.method.name and row.get("accuracy") is not None]
        dense = {row["settings"]["task"]: {"ci_low": row["accuracy_low"], "ci_high": row["accuracy_high"]}
                 for row in mine if row["settings"]["gamma"] == 0 and row["settings"]["weights"] == "pretrained"}
        present = {row["settings"]["weights"] for row in mine if row["settings"]["gamma"] != 0}
        weights = next((w for w in self.weights if w in present), None)
        if not dense or weights is None:
            return _not_run(Row(self.method, None, (("task", "any"), ("weights", self.weights[0]), ("gamma", "any"))))
        points = [{**row["settings"], "accuracy": row["accuracy"], "fraction_pruned": 1 - row["cost"]}
                  for row in mine if row["settings"]["gamma"] != 0 and row["settings"]["weights"] == weights]
        verdict = claim_verdict(zero_shot_held(points, dense), weights, self.target)
        n = min(int(row["accuracy_n"]) for row in mine if row.get("accuracy_n") is not None) if any(
            row.get("accuracy_n") is not None for row in mine) else None
        items = "" if n is None else f"; at least {n} items a task"
        if verdict["held_at"] is None:
            return Verdict("not reproduced", 0.0, self.target, f"no pruned model keeps every task within dense's "
                           f"95% interval (first break at {verdict['breaks_at']:.0%} pruned: "
                           f"{', '.join(verdict['breaks_on'])}){items}")
        status = "reproduced" if verdict["target_holds"] else "partly"
        breaks = ("" if verdict["breaks_at"] is None else
                  f"; breaks at {verdict['breaks_at']:.0%} ({', '.join(verdict['breaks_on'])})")
        return Verdict(status, verdict["held_at"], self.target,
                       f"every task within dense's 95% interval up to {verdict['held_at']:.0%} pruned "
                       f"(gamma={verdict['gamma']:g}, {weights} weights){breaks}{items}")


@dataclass(frozen=True)
class NotYet(Claim):
    """A claim no row of this package measures yet; ``reason`` says what is missing."""

    reason: str = ""

    def judge(self, rows) -> Verdict:
        return Verdict("not run", None, None, self.reason)


# ----------------------------------------------------------------------------- the claims

_MINILM = ("MiniLM 6 x 12 heads fine-tuned offline (paper: BERT-Mini 4 x 4); our recipe (nested gate start, "
           "two-sided term, 2 adaptation epochs); the paper's recipe is not run on it")
_VIT = "4-layer ViT on Fashion-MNIST, 50 tokens (paper: DeiT-S on ImageNet, 197 tokens)"
_HARDWARE = "timed on this machine's CPU, one thread (paper: an arm64 laptop)"
_NESTED = ("our recipe starts the gates nested, so the ranking is the same at every budget by construction "
           "(Spearman starts at 1); the paper's flat start, where the ranking is a finding, is not run on MiniLM")

CLAIMS: tuple[Claim, ...] = (
    # -- Budgeted Attention Allocation. The paper's method names hold the paper's recipe; where this package's
    # recipe differs (nested gate start, two-sided budget term, longer hard adaptation), a second claim judges it.
    CostTracks("baa-cost-tracks-budget", "budgeted attention", "Table 1, Fig. 1",
               "One warm-started budgeted checkpoint delivers the requested attention cost at each budget.",
               "largest |soft cost - budget|", "the paper's recipe; its lambdas are not published",
               rows=(Row(SYN.warm, 0.25), Row(SYN.warm, 0.5))),
    CostTracks("baa-cost-tracks-budget-our-recipe", "budgeted attention", "Table 1, Fig. 1",
               "The same, with this package's recipe (nested gate start, two-sided budget term).",
               "largest |soft cost - budget|", "our recipe",
               rows=(Row(SYN.warm_ours, 0.25), Row(SYN.warm_ours, 0.5)),
               theirs=(Row(SYN.warm, 0.25), Row(SYN.warm, 0.5))),
    SeedCollapse("baa-scratch-seed-collapse", "budgeted attention", "Section 6.2",
                 "Budgeted gates trained from scratch are seed-sensitive: one of three seeds collapsed.",
                 "seeds collapsed", "the paper's recipe (flat gates, one-sided term)", method=SYN.scratch_seed,
                 theirs=paper_numbers.SCRATCH_SEEDS_COLLAPSED),
    Margin("baa-warm-beats-scratch", "budgeted attention", "Section 6.2",
           "Budgeted gates on a dense warm start beat gates trained from scratch, which are seed-sensitive.",
           "accuracy of warm start minus from scratch at b = 0.5, points",
           "from scratch: mean over the profile's seeds",
           better=Row(SYN.warm, 0.5), worse=Row(SYN.scratch, 0.5), tolerance=5.0),
    Retention("baa-synthetic-retention", "budgeted attention", "Table 1",
              "On the synthetic task the warm-started budgeted model keeps dense accuracy at b = 0.5.",
              "accuracy minus own dense, points", row=Row(SYN.warm, 0.5)),
    Retention("baa-agnews-budgeted", "budgeted attention", "Table 3",
              "On AG News the budgeted model at b = 0.5 is within about half a point of dense.",
              "accuracy minus own dense, points", row=Row(AGN.warm, 0.5)),
    Retention("baa-agnews-budgeted-our-recipe", "budgeted attention", "Table 3",
              "The same, with this package's recipe.", "accuracy minus own dense, points", "our recipe",
              row=Row(AGN.warm_ours, 0.5), theirs=Row(AGN.warm, 0.5)),
    Retention("baa-agnews-static", "budgeted attention", "Table 3",
              "A static specialist trained for b = 0.5 keeps dense accuracy.",
              "accuracy minus own dense, points", "static gates start nested (our recipe)", row=Row(AGN.static, 0.5)),
    Margin("baa-hard-adaptation-recovers", "budgeted attention", "Table 4",
           "Hard head skipping loses accuracy without adaptation; one epoch of adaptation recovers most of it.",
           "hard accuracy adapted minus unadapted at b = 0.5, points",
           better=Row(AGN.hard_adapted, 0.5), worse=Row(AGN.hard_unadapted, 0.5), tolerance=3.0),
    Retention("baa-agnews-hard-retention", "budgeted attention", "Table 4",
              "Adapted hard skipping at b = 0.5 costs about two points against dense.",
              "accuracy minus own dense, points", row=Row(AGN.hard_adapted, 0.5)),
    Retention("baa-agnews-hard-retention-our-recipe", "budgeted attention", "Table 4",
              "The same, with this package's recipe (3 epochs of adaptation on the nested start).",
              "accuracy minus own dense, points", "our recipe",
              row=Row(AGN.hard_adapted_ours, 0.5), theirs=Row(AGN.hard_adapted, 0.5)),
    Speed("baa-agnews-skip-speed", "budgeted attention", "Table 4",
          "Skipping half the heads makes single-thread CPU inference 1.28x faster.",
          "measured speed-up over dense", f"our recipe's model; {_HARDWARE}",
          row=Row(AGN.hard_adapted_ours, 0.5), theirs=Row(AGN.hard_adapted, 0.5)),
    Retention("baa-bert-hard-adapted", "budgeted attention", "Table 5",
              "A pretrained encoder's hard-adapted budgeted model keeps dense accuracy at b = 0.5.",
              "accuracy minus own dense, points", _MINILM, row=Row(BERT.hard_adapted, 0.5)),
    Retention("baa-bert-static", "budgeted attention", "Table 6",
              "A static hard specialist at b = 0.5 is close to dense.",
              "accuracy minus own dense, points", _MINILM, row=Row(BERT.static_hard, 0.5)),
    Retention("baa-bert-posthoc", "budgeted attention", "Table 7",
              "Dense post-hoc structural pruning at b = 0.5 loses about a point.",
              "accuracy minus own dense, points", _MINILM, row=Row(BERT.posthoc, 0.5)),
    Retention("baa-bert-recovery", "budgeted attention", "Table 7",
              "One recovery epoch after post-hoc pruning at b = 0.5 brings accuracy back to dense.",
              "accuracy minus own dense, points", _MINILM, row=Row(BERT.posthoc_recovered, 0.5)),
    Speed("baa-bert-structural-speed", "budgeted attention", "Table 8",
          "Structural pruning of half the heads makes the encoder 1.20x faster on CPU.",
          "measured speed-up over dense", f"{_MINILM}; {_HARDWARE}", row=Row(BERT.structural, 0.5)),
    Retention("baa-dbpedia-hard-adapted", "budgeted attention", "Table 9",
              "On DBpedia14 the hard-adapted budgeted model at b = 0.5 keeps dense accuracy.",
              "accuracy minus own dense, points", _MINILM, row=Row(DBPEDIA.hard_adapted, 0.5)),
    Retention("baa-dbpedia-soft-low-budget", "budgeted attention", "Table 9",
              "At b = 0.1 the soft-gated DBpedia14 model loses about two points.",
              "accuracy minus own dense, points", _MINILM, row=Row(DBPEDIA.soft_sweep, 0.1), tolerance=2.0),
    Statistic("baa-gate-ranking", "budgeted attention", "Section 6.5",
              "The gates' head ranking is stable across budgets (Spearman 0.91 between b = 0.25 and 0.75).",
              "Spearman correlation of the gates", _MINILM, row=Row(BERT.gate_ranking),
              beside=(Row(DBPEDIA.gate_ranking),), not_comparable=_NESTED),
    Statistic("baa-compute", "budgeted attention", "Section 6.5",
              "Structural pruning at b = 0.5 removes 19.2% of the transformer layers' MACs at length 128.",
              "% of layer MACs removed", "counted on a random-weight model of BERT-Mini's shape (4 x 4 heads, "
              "width 256); ours beside it", row=Row(BERT.compute, 0.5, (("model", "BERT-Mini shape"),)),
              beside=(Row(BERT.compute, 0.5, (("model", "ours"),)),), tolerance=0.5),
    # -- Dynamic Context Pruning
    PerplexityHeld("dcp-perplexity-gpt2", "dynamic context pruning", "Abstract, Section 5",
                   "Up to 80% of the context can be pruned without significant perplexity degradation.",
                   "perplexity over dense", "a small GPT-2 trained here", row=Row(GPT2.headline, 0.2)),
    PerplexityHeld("dcp-perplexity-pretrained", "dynamic context pruning", "Abstract, Section 5",
                   "The same holds for a pretrained decoder fine-tuned with the interaction.",
                   "perplexity over dense", row=Row(DECODER.headline, 0.2), protocol_from=DECODER.headline,
                   references=(Row(DECODER.dense_finetuned, 1.0), Row(DECODER.dense, 1.0))),
    Speed("dcp-throughput", "dynamic context pruning", "Abstract",
          "Removing dropped tokens from the KV cache gives up to 2x inference throughput.",
          "generation throughput over dense", f"a small GPT-2; {_HARDWARE}", row=Row(GPT2.headline, 0.2),
          share=0.9),
    MemoryFollowsPruning("dcp-kv-memory", "dynamic context pruning", "Abstract, Section 3",
                         "Dropped tokens are erased from the KV cache, which reduces memory in proportion.",
                         "KV-cache memory ratio, dense bytes / ours", "a small GPT-2; the cache at the end of "
                         "generation after a long prompt", row=Row(GPT2.headline, 0.2)),
    ZeroShotHeld("dcp-zero-shot", "dynamic context pruning", "Section 5",
                 "Zero-shot accuracy on downstream tasks is held with up to 80% of the context pruned.",
                 "largest fraction pruned with every task within dense's 95% interval",
                 "LAMBADA-, HellaSwag-style and topic tasks built offline from held-out text",
                 method=DECODER.zero_shot, protocol_from=DECODER.headline),
    KindsFirst("dcp-token-kinds", "dynamic context pruning", "Section 5",
               "Punctuation and stop words are dropped first.",
               "(text, kind) pairs where the kind loses more of its pairs than other tokens",
               "a small GPT-2 trained here; the specialist closest to 80% pruned", method=GPT2.token_kinds),
    KindsFirst("dcp-token-kinds-pretrained", "dynamic context pruning", "Section 5",
               "The same on a pretrained decoder.",
               "(text, kind) pairs where the kind loses more of its pairs than other tokens",
               "held-out Austen and Wikipedia", method=DECODER.token_kinds, protocol_from=DECODER.headline),
    # -- Sparsifiner
    Retention("sparsifiner-keep-0.5", "sparsifiner", "Table 2",
              "Keeping half the connections costs no accuracy.",
              "accuracy minus own dense, points", _VIT, protocol_from=VIT.dense, row=Row(VIT.sparsifiner, 0.5)),
    Retention("sparsifiner-keep-0.1", "sparsifiner", "Table 2",
              "Keeping 10% of the connections (20 of 197) costs 0.4 points of top-1.",
              "accuracy minus own dense, points", _VIT, protocol_from=VIT.dense, row=Row(VIT.sparsifiner, 0.1)),
    CostAtMost("sparsifiner-flops", "sparsifiner", "Table 2",
               "At keep rate 0.1 the MHSA FLOPs fall by 69%.",
               "MHSA FLOPs as a fraction of dense", _VIT, protocol_from=VIT.dense, row=Row(VIT.sparsifiner, 0.1)),
    Retention("sparsifiner-with-evit", "sparsifiner", "Table 1",
              "Sparsifiner on top of EViT token pruning (keep 0.7) costs no accuracy beyond EViT's.",
              "accuracy minus EViT alone, points", _VIT, protocol_from=VIT.dense,
              row=Row(VIT.evit_sparsifiner, 0.25, (("token_keep", 0.7),)), reference=Row(VIT.evit, 0.7)),
    Margin("sparsifiner-beats-linformer", "sparsifiner", "Table 4",
           "At an equal budget Sparsifiner beats Linformer (79.79 vs 77.54).",
           "accuracy of Sparsifiner minus Linformer, points", _VIT, protocol_from=VIT.dense,
           better=Row(VIT.sparsifiner, 0.25), worse=Row(VIT.linformer, None), tolerance=1.0,
           theirs_better=paper_numbers.SPARSIFINER_S_TABLE4_ACCURACY),
)


@dataclass(frozen=True)
class Evidence:
    """What the intervals are computed from besides the merged rows: each seed's own rows of a notebook run at
    several seeds ({notebook: {seed: rows}}), and the report's profile (the test-set size of rows that do not
    carry their own ``accuracy_n``)."""

    seed_rows: dict
    profile: str | None = None

    @classmethod
    def of(cls, rows, seed_rows=None, profile=None) -> Evidence:
        return cls(seed_rows or {}, profile)


@dataclass(frozen=True)
class Judged:
    claim: Claim
    verdict: Verdict
    setup: str  # the claim's setup on these rows (``Claim.setup_for``)

    def as_dict(self) -> dict:
        """The judged claim as ``results.json`` stores it and the pages show it."""
        return {"id": self.claim.id, "paper": self.claim.paper, "where": self.claim.where,
                "claim": self.claim.statement, "metric": self.claim.metric, "setup": self.setup,
                "setting": getattr(self.claim, "setting", ""), "recipe": getattr(self.claim, "recipe", "paper"),
                "verdict": self.verdict.status, "ours": self.verdict.ours,
                "low": getattr(self.verdict, "low", None), "high": getattr(self.verdict, "high", None),
                "theirs": self.verdict.theirs, "region": getattr(self.verdict, "region", ""),
                "covers": getattr(self.verdict, "covers", ""), "why": self.verdict.why}


def judge_all(rows, claims=CLAIMS, evidence: Evidence | None = None) -> list[Judged]:
    """Every claim judged on ``rows`` (the rows of a report's ``results.json``)."""
    return [Judged(claim, claim.judge(rows), claim.setup_for(rows)) for claim in claims]


def judgement_table(rows, evidence: Evidence | None = None, claims=CLAIMS):
    """The claims that ``rows`` (one notebook's, or a report's) test, judged on them, as a table for a notebook
    to display: claim, where, recipe, ours with its interval, the paper's, the region, the verdict and why.
    Claims none of whose experiments appear in ``rows`` are left out."""
    import pandas as pd

    experiments = {row.get("experiment") for row in rows}
    shown = [c for c in claims if not experiments.isdisjoint(c.experiments())]
    records = []
    for judged in judge_all(rows, shown, evidence):
        d = judged.as_dict()
        ours = "–" if d["ours"] is None else (f"{d['ours']:.3g}" if d["low"] is None else
                                              f"{d['ours']:.3g} [{d['low']:.3g}, {d['high']:.3g}]")
        records.append({"claim": d["claim"], "where": d["where"], "recipe": d["recipe"], "ours [95% interval]": ours,
                        "paper": "–" if d["theirs"] is None else f"{d['theirs']:.3g}", "holds if": d["region"],
                        "verdict": d["verdict"], "why": d["why"]})
    return pd.DataFrame(records, columns=["claim", "where", "recipe", "ours [95% interval]", "paper", "holds if",
                                          "verdict", "why"])
