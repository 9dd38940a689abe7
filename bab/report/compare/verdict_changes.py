"""Each claim's verdict in a report beside its verdict in an earlier report: what a rebuild changed.

    git show <commit>:reports/paper/results.json > /tmp/before.json
    python -m bab report compare --profile paper --verdicts /tmp/before.json

Claims are matched by id (the paper's recipe and ours have ids of their own). A claim only one of the two reports
judges is listed too, as "new" or "gone". Nothing is recomputed: both sides are read from the results.json files.
"""

from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["id", "recipe", "verdict before", "before", "verdict now", "now", "change", "why now"]


def _number(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def estimate_text(claim: dict | None) -> str:
    """A claim's number with its interval, "0.875 [0.86, 0.89]"; the number alone where the interval is the point;
    "-" where the claim was not judged on a number."""
    if claim is None or claim.get("ours") is None:
        return "-"
    ours, low, high = claim["ours"], claim.get("low"), claim.get("high")
    if low is None or high is None or low == high == ours:
        return _number(ours)
    return f"{_number(ours)} [{_number(low)}, {_number(high)}]"


def _change(before: dict | None, now: dict | None) -> str:
    if before is None:
        return "new"
    if now is None:
        return "gone"
    return "same" if before["verdict"] == now["verdict"] else "changed"


def verdict_changes(before: dict, now: dict) -> pd.DataFrame:
    """One row per claim of either results.json (``before``, ``now``: the parsed files), in ``now``'s order and then
    the claims only ``before`` has: both verdicts, both numbers with their intervals, and whether the verdict moved."""
    old = {c["id"]: c for c in before.get("claims", [])}
    new = {c["id"]: c for c in now.get("claims", [])}
    if not old and not new:
        raise ValueError("neither results.json holds any claims: give the results.json of a built report "
                         "(reports/<profile>/results.json)")
    rows = []
    for claim_id in [*new, *(i for i in old if i not in new)]:
        b, n = old.get(claim_id), new.get(claim_id)
        rows.append({"id": claim_id, "recipe": (n or b).get("recipe", ""),
                     "verdict before": "-" if b is None else b["verdict"], "before": estimate_text(b),
                     "verdict now": "-" if n is None else n["verdict"], "now": estimate_text(n),
                     "change": _change(b, n), "why now": "" if n is None else n.get("why", "")})
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (pandas' own needs the tabulate package, which bab does not install)."""
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def changes_markdown(table: pd.DataFrame) -> str:
    """``verdict_changes`` as a Markdown table, and a line counting the moved verdicts."""
    counts = table["change"].value_counts()
    summary = ", ".join(f"{counts.get(kind, 0)} {kind}" for kind in ("same", "changed", "new", "gone"))
    return "\n".join([markdown_table(table[COLUMNS]), "", f"{len(table)} claims: {summary}."])
