"""Judged claims counted and labelled as the front page and RECORD.md show them."""

from __future__ import annotations

from bab.report.claims.verdicts import DECIDING, PAPERS, RECIPES, VERDICTS

# the two claims tables of the front page and RECORD.md: the papers' recipes, then what this package's recipe adds
CLAIM_SECTIONS = (("paper", "Claims tested with the papers' recipes"), ("ours", "What this package's recipe adds"))


def verdict_label(claim) -> str:
    """A judged claim's verdict as counted and shown: "reproduced", or "reproduced, indicative" when it stands on
    fewer training seeds than it takes to decide."""
    return f"{claim['verdict']}, indicative" if claim.get("indicative") else claim["verdict"]


def claims_summary(claims):
    """{paper: {recipe: {verdict: count}}} of judged claims (plain dicts): the claims tested with the paper's
    recipe ("paper") apart from what this package's recipe adds ("ours"), every verdict present, the indicative
    ones (fewer than three training seeds) counted apart from those that decide."""
    labels = [label for v in VERDICTS for label in ((v, f"{v}, indicative") if v in DECIDING else (v,))]
    counts = {paper: {recipe: dict.fromkeys(labels, 0) for recipe in RECIPES} for paper in PAPERS}
    for claim in claims:
        counts[claim["paper"]][claim.get("recipe", "paper")][verdict_label(claim)] += 1
    return counts
