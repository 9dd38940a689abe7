"""The smoke regression check: the result rows of a smoke run against the stored reference, metric by metric.

``python -m bab notebooks refresh`` stores each notebook's smoke rows in ``tests/reference/smoke_rows.json``
as it stores its outputs; ``./run_all.sh test`` has nbval write the rows it produces to ``$BAB_RESULTS_DIR``,
and ``tests/report/test_smoke_regression.py`` (run after the notebooks) compares the two. The tolerances are
wide enough for another CPU of this kind and narrow enough to catch a real change. Measured speed-ups are not
compared: they depend on the machine's load, and the timing verdicts cover them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bab.experiments.methods import settings_text

REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "reference" / "smoke_rows.json"
# The torch thread count of every smoke run whose outputs or rows are stored (``notebooks refresh``) or checked
# (nbval, through conftest.py), whatever $BAB_THREADS or the machine's core count says: reductions split over
# another number of threads round differently, and a few-step training carries that far past the tolerances
# (notebook 06 at one thread kept 13% of the context where the two-thread reference kept 29%).
SMOKE_THREADS = 2
# metric -> (kind, tolerance): "abs" in the metric's unit, "rel" as a fraction of the reference value, or of 1
# where the reference is smaller than 1 (a method's ``value`` may be a correlation near 1 or a share near 0, where a
# fraction of the value itself would be no tolerance at all)
TOLERANCES = {"accuracy": ("abs", 2.0), "accuracy_std": ("abs", 2.0), "cost": ("abs", 0.02),
              "perplexity": ("rel", 0.05), "memory_ratio": ("rel", 0.05), "analytic_limit": ("rel", 0.01),
              "value": ("rel", 0.05)}


def row_key(row: dict) -> tuple:
    budget = row.get("budget")
    return (row["experiment"], row["method"], None if budget is None else round(float(budget), 4),
            settings_text(row.get("settings")))


def _differs(kind: str, tolerance: float, ours, reference) -> bool:
    if ours is None or reference is None:
        return (ours is None) != (reference is None)
    if kind == "abs":
        return abs(ours - reference) > tolerance
    return abs(ours - reference) > tolerance * max(abs(reference), 1.0)


def compare_rows(rows: list[dict], reference: list[dict]) -> list[str]:
    """Every difference between ``rows`` and ``reference`` beyond the tolerances, as lines (empty: none)."""
    ours = {row_key(r): r for r in rows}
    theirs = {row_key(r): r for r in reference}
    problems = [f"missing row {key}" for key in theirs if key not in ours]
    problems += [f"row not in the reference {key}" for key in ours if key not in theirs]
    for key in ours.keys() & theirs.keys():
        for metric, (kind, tolerance) in TOLERANCES.items():
            a, b = ours[key].get(metric), theirs[key].get(metric)
            if _differs(kind, tolerance, a, b):
                limit = f"{tolerance:g}" if kind == "abs" else f"{tolerance:.0%}"
                problems.append(f"{key}: {metric} {a} vs reference {b} (tolerance {limit})")
    return sorted(problems)


def metric_count(reference: dict) -> int:
    """How many numbers the reference guards (metrics with a value, over every row)."""
    return sum(sum(1 for metric in TOLERANCES if row.get(metric) is not None and math.isfinite(row[metric]))
               for rows in reference.values() for row in rows)


def read_reference(path=REFERENCE) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else {}


def store_reference(name: str, rows: list[dict], path=REFERENCE) -> None:
    """Replace the reference rows of ``name`` (a rows file's stem) and write the file, sorted for review."""
    path = Path(path)
    reference = read_reference(path)
    reference[name] = rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(reference.items())), indent=1, sort_keys=True) + "\n")
