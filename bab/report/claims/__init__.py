"""The papers' headline claims, each a hypothesis with a margin, judged by an interval on our result rows.

A claim names where a paper makes it, says it in one sentence, and points at the rows that test it by typed
ids: our rows by the ``Method`` objects the experiments declare (``bab.experiments.methods``), the paper's by the
same objects in ``bab.report.results.paper``. Each claim is restated as a *region* our number must lie in (``Region``):
"keeps dense accuracy" is retention >= -delta, "costs about two points" is within -2 +- delta, "beats" is a margin
> 0. Each delta is written once, beside the claim, with its reason from the paper's wording (its rounding or its
reported spread), never after seeing our number.

Our number comes with a 95% interval (``bab.core.statistics``): over seeds and test examples where a notebook ran
at several seeds, over test examples otherwise, and the claim line says which. The verdict follows from the
interval and the region alone:

- reproduced: the interval lies inside the region;
- not reproduced: it lies outside;
- inconclusive: it straddles a boundary (more seeds or test examples would decide it);
- not informative: the outcome could not tell the method from a weaker one (a ceiling: a baseline lands in the
  region too);
- partly: a claim with parts, some of which hold and some not (each part named);
- not comparable: our number cannot test the claim (said why); not run: a row it needs is missing.

Accuracy claims compare *retention* (ours - our own dense model) with the paper's (theirs - their dense), never
levels across datasets. Each claim says whose recipe it tests: the paper's (its unpublished knobs ours) or this
package's, counted apart on the front page.

Modules: ``verdicts`` (regions, verdicts, row pointers), ``evidence`` (the intervals' units), ``kinds`` (the kinds of
claim, a package: ``base``, ``accuracy``, ``cost``, ``language``, ``numbers``), ``registry`` (the rules as data:
``rules/*.yaml``, one file per paper, their digests and the ledger of amendments); judging them is here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bab.report.claims.counts import verdict_label
from bab.report.claims.evidence import Evidence
from bab.report.claims.kinds import (
    Accuracy,
    BeatsOverSeeds,
    BeatsStatic,
    Claim,
    CostTracks,
    Counted,
    Dominates,
    KindsFirst,
    MemoryFollowsPruning,
    Monotone,
    NotYet,
    Parts,
    PerplexityHeld,
    SeedCollapse,
    Speed,
    Statistic,
    ZeroShotHeld,
    margin,
    retention,
)
from bab.report.claims.registry import amendments, build_claim, load_claims, registry_digest, rule_digest
from bab.report.claims.verdicts import (
    DECIDING,
    EPSILON,
    PAPERS,
    RECIPES,
    SEEDS_TO_DECIDE,
    VERDICTS,
    Region,
    Row,
    Verdict,
    _combine,
    about,
    at_least,
    at_most,
    beats,
    dense_of,
    judged,
    keeps,
    loses,
)

__all__ = ["CLAIMS", "DECIDING", "EPSILON", "PAPERS", "RECIPES", "SEEDS_TO_DECIDE", "VERDICTS", "Accuracy",
           "BeatsOverSeeds", "BeatsStatic", "Claim", "CostTracks", "Counted", "Dominates", "Evidence", "Judged",
           "KindsFirst", "MemoryFollowsPruning", "Monotone", "NotYet", "Parts", "PerplexityHeld", "Region", "Row",
           "SeedCollapse", "Speed", "Statistic", "Verdict", "ZeroShotHeld", "_combine", "amendments_judged", "about",
           "at_least", "at_most", "beats", "claim_by_id", "dense_of", "judge_all", "judged", "judgement_table",
           "keeps", "loses", "margin", "registry_digest", "retention", "seeds_of"]


# every registered rule, read once from rules/*.yaml
CLAIMS = load_claims()


@dataclass(frozen=True)
class Judged:
    claim: Claim
    verdict: Verdict
    setup: str  # the claim's setup on these rows (``Claim.setup_for``)
    seeds: int = 1  # the training seeds behind the rows it read (the fewest of its notebooks')

    @property
    def indicative(self) -> bool:
        """A verdict that says the claim holds or not, from fewer training seeds than it takes to decide."""
        return self.verdict.status in DECIDING and self.seeds < SEEDS_TO_DECIDE

    def as_dict(self) -> dict:
        """The judged claim as ``results.json`` stores it and the pages show it."""
        c, v = self.claim, self.verdict
        return {"id": c.id, "paper": c.paper, "where": c.where, "claim": c.statement, "metric": c.metric,
                "setup": self.setup, "setting": c.setting, "recipe": c.recipe, "verdict": v.status, "ours": v.ours,
                "low": v.low, "high": v.high, "theirs": v.theirs, "region": v.region, "covers": v.covers,
                "why": v.why, "decided_by": v.decided_by, "seeds": self.seeds, "indicative": self.indicative,
                "rule": rule_digest(c.id)}


def seeds_of(claim: Claim, rows) -> int:
    """The training seeds behind ``claim``'s rows: for each experiment it reads, the most seeds any of its rows
    averages (a per-seed method's rows count one each), the fewest over those experiments; 1 when none ran."""
    counts = []
    for experiment in claim.experiments():
        mine = [len(row.get("seeds") or [0]) for row in rows if row.get("experiment") == experiment]
        if mine:
            counts.append(max(mine))
    return min(counts, default=1)


def judge_all(rows, claims=CLAIMS, evidence: Evidence | None = None) -> list[Judged]:
    """Every claim judged on ``rows`` (the rows of a report's ``results.json``), its intervals from ``evidence``."""
    evidence = evidence or Evidence()
    judged = []
    for claim in claims:
        verdict, seeds = claim.judge(rows, evidence), seeds_of(claim, rows)
        seeds = seeds if verdict.seeds is None else min(verdict.seeds, seeds)
        judged.append(Judged(claim, verdict, claim.setup_for(rows), seeds))
    return judged


def judgement_table(rows, evidence: Evidence | None = None, claims=CLAIMS, *, ledger=None):
    """The claims that ``rows`` (one notebook's, or a report's) test, judged on them, as a table for a notebook to
    display: claim, where, recipe, ours with its interval, the paper's, where ours must lie, the verdict and why.
    Claims none of whose experiments appear in ``rows`` are left out. Without ``evidence``, the intervals pair
    the rows on the per-unit outcomes ``ledger`` (the study's, ``bab.core.ledger``) recorded for them, as the report
    will."""
    evidence = evidence or Evidence(outcomes={} if ledger is None else ledger.outcomes_for(rows))
    columns = ["claim", "where", "recipe", "ours [95% interval]", "paper", "holds if", "verdict", "seeds", "why"]
    experiments = {row.get("experiment") for row in rows}
    shown = [c for c in claims if not experiments.isdisjoint(c.experiments())]
    records = []
    for judged_claim in judge_all(rows, shown, evidence):
        d = judged_claim.as_dict()
        if d["ours"] is None:
            ours = "–"
        elif d["low"] is None or d["low"] == d["high"]:
            ours = f"{d['ours']:.3g} (no interval)"
        else:
            ours = f"{d['ours']:.3g} [{d['low']:.3g}, {d['high']:.3g}]"
        if d["decided_by"]:
            ours += f" ({d['decided_by']})"
        records.append({"claim": d["claim"], "where": d["where"], "recipe": d["recipe"], "ours [95% interval]": ours,
                        "paper": "–" if d["theirs"] is None else f"{d['theirs']:.3g}", "holds if": d["region"] or "–",
                        "verdict": verdict_label(d), "seeds": d["seeds"], "why": d["why"]})
    return JudgementTable(records, columns=columns)


class JudgementTable(pd.DataFrame):
    """A judgement table that a notebook shows whole: every claim's text and why, never cut at pandas' column
    width."""

    @property
    def _constructor(self):
        return JudgementTable

    def _repr_html_(self):
        with pd.option_context("display.max_colwidth", None):
            return super()._repr_html_()

    def __repr__(self):
        with pd.option_context("display.max_colwidth", None):
            return super().__repr__()


def amendments_judged(rows, evidence: Evidence | None = None) -> list[dict]:
    """The ledger's amendments, newest first, each with the verdict its claim gets on ``rows`` under the rule before
    it and under the rule now: {date, claim, reason, before, before_note, after}; ``before_note`` says where the verdict
    before comes from when today's code cannot judge the old rule (the ledger's verdict on the record)."""
    evidence = evidence or Evidence()
    shown = []
    for amendment in reversed(amendments()):
        before = amendment.get("before")
        note = ""
        try:
            old = build_claim(before).judge(rows, evidence).status if before else "not registered"
        except (TypeError, AttributeError, ValueError):
            # a rule whose kind has changed shape since cannot be judged by today's code: the verdict it gave on
            # the record when amended stands in the ledger
            old, note = amendment.get("on_record", {}).get("before", "?"), "on the record, when amended"
        new = claim_by_id(amendment["claim"]).judge(rows, evidence).status
        shown.append({"date": str(amendment["date"]), "claim": amendment["claim"], "reason": amendment["reason"],
                      "before": old, "before_note": note, "after": new})
    return shown


def claim_by_id(claim_id: str, claims=CLAIMS) -> Claim:
    """The claim named ``claim_id``; KeyError naming the known ids when there is none."""
    for claim in claims:
        if claim.id == claim_id:
            return claim
    raise KeyError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in claims)}")
