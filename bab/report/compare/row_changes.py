"""Two builds of a report row by row: what a change that should not move a result (training in bfloat16, a faster
kernel) did to every accuracy and perplexity both builds measured, each change with its paired interval.

    python -m bab report compare --profile quick --rows /tmp/float32/reports/quick

Rows are matched by experiment, method, budget, settings and seeds (``bab.core.outcomes.outcome_key``) across the
notebooks' results (``results/<notebook>.json``) and paired on the per-unit outcomes kept beside them: an accuracy
as the difference in points over the same test examples, a perplexity as the ratio over the same windows. A
change "holds" where its interval covers no change (0 points, a ratio of 1); beside it, whether the new value lies
inside the earlier value's own interval. Nothing is retrained or re-evaluated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bab.core import outcomes
from bab.core.statistics import Interval, accuracy_interval, paired_difference, perplexity_ratio
from bab.experiments.methods import settings_text
from bab.report.pages.index import collect_outcomes
from bab.report.results.contract import read_json

COLUMNS = ["notebook", "experiment", "method", "budget", "settings", "metric", "before", "now", "change", "holds",
           "inside before's interval"]


def report_rows(folder) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Every result row of a built report folder's notebooks (each with its notebook's name) and their outcomes."""
    folder = Path(folder)
    paths = sorted((folder / "results").glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{folder} holds no results/*.json: give a built report folder "
                                f"(reports/<profile>, after ./run_all.sh or python -m bab report run)")
    rows = [{**row, "notebook": path.stem} for path in paths for row in read_json(path)["rows"]]
    return rows, collect_outcomes(folder)


def _paired(kept_before, kept_now, row, kinds) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """(before's arrays of ``kinds`` for ``row``, now's), each put in one order of units by their ids; None where
    either build lacks one or they were not measured on the same units."""
    ids = [kept.get(outcomes.outcome_key(row, "unit_ids")) for kept in (kept_before, kept_now)]
    before, now = [], []
    for kind in kinds:
        pair = [kept.get(outcomes.outcome_key(row, kind)) for kept in (kept_before, kept_now)]
        aligned = None if any(a is None for a in pair) else outcomes.align(pair, ids)
        if aligned is None:
            return None
        before.append(aligned[0])
        now.append(aligned[1])
    return before, now


def _accuracy(kept_before, kept_now, row) -> tuple[Interval, Interval] | None:
    """(now - before in points, paired; before's own accuracy interval over its test examples)."""
    pair = _paired(kept_before, kept_now, row, ["correct"])
    if pair is None:
        return None
    (before,), (now,) = pair
    return paired_difference(now, before).scaled(100), accuracy_interval(100 * float(before.mean()), before.size)


def _perplexity(kept_before, kept_now, row) -> tuple[Interval, Interval] | None:
    """(now / before, paired over windows; before's own perplexity interval over its windows)."""
    pair = _paired(kept_before, kept_now, row, ["window_nll", "window_tokens"])
    if pair is None:
        return None
    (nll, tokens), (now_nll, _) = pair
    # the perplexity itself is its ratio to a model that gives every window a log-likelihood of 0
    return perplexity_ratio(now_nll, nll, tokens), perplexity_ratio(nll, np.zeros_like(nll), tokens)


# metric -> (how the change is paired, its format and unit, the value that means "no change")
METRICS = {"accuracy": (_accuracy, "+.2f", " points", 0.0), "perplexity": (_perplexity, ".4f", "x", 1.0)}


def row_changes(before, now) -> pd.DataFrame:
    """One row per accuracy or perplexity that both report folders measured (``before``, ``now``: e.g.
    reports/quick of two builds), in ``now``'s order: both values, the change with its 95% interval over the units
    both were measured on, whether that interval covers no change, and whether the new value lies inside the
    earlier value's own 95% interval (its test examples' or windows' sampling); "no outcomes" where a side kept
    none."""
    rows_before, kept_before = report_rows(before)
    rows_now, kept_now = report_rows(now)
    earlier = {outcomes.outcome_key(row): row for row in rows_before}
    table = []
    for row in rows_now:
        old = earlier.get(outcomes.outcome_key(row))
        if old is None:
            continue
        for metric, (pair, spec, unit, unchanged) in METRICS.items():
            if row.get(metric) is None or old.get(metric) is None:
                continue
            paired = pair(kept_before, kept_now, row)
            if paired is None:
                shown, holds, inside = "-", "no outcomes", "no outcomes"
            else:
                change, own = paired
                shown = change.text(spec) + unit
                holds = "yes" if change.low <= unchanged <= change.high else "no"
                inside = "yes" if own.low <= float(row[metric]) <= own.high else "no"
            table.append({"notebook": row["notebook"], "experiment": row["experiment"], "method": row["method"],
                          "budget": row.get("budget"), "settings": settings_text(row.get("settings")),
                          "metric": metric, "before": old[metric], "now": row[metric],
                          "change": shown, "holds": holds, "inside before's interval": inside})
    if not table:
        raise ValueError(f"{before} and {now} share no row with an accuracy or a perplexity: give two builds of the "
                         f"same notebooks at the same profile and seeds")
    return pd.DataFrame(table, columns=COLUMNS)


def changes_summary(table: pd.DataFrame) -> str:
    """'41 of 43 changes hold (interval covers no change), 2 do not, 0 without outcomes; 43 of 43 new values lie
    inside the earlier value's interval'."""
    counts, inside = table["holds"].value_counts(), table["inside before's interval"].value_counts()
    return (f"{counts.get('yes', 0)} of {len(table)} changes hold (interval covers no change), "
            f"{counts.get('no', 0)} do not, {counts.get('no outcomes', 0)} without outcomes; "
            f"{inside.get('yes', 0)} of {len(table)} new values lie inside the earlier value's interval")
