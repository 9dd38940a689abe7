"""The results contract: the rows a notebook hands to the report.

A notebook calls ``save_results(rows, results_path, study.ledger)`` with ``results_path`` the parameter that
papermill injects; each row names an experiment, a method, a budget, the cost, the accuracy
and the measured speed-up (optional: perplexity, memory ratio, a note). The report merges the
rows and puts them next to the papers' numbers (``bab.report.results.paper.comparison_table``).
"""

import contextlib
import json
import math
import numbers
import os
from pathlib import Path

from bab.core import outcomes, strict_json
from bab.core.folders import write_atomic
from bab.core.ledger import RunLedger
from bab.core.provenance import loaded_code_digests
from bab.core.provenance import now_iso as now_iso  # a run record's timestamps, for the report's modules

# The version of the rows' meaning: 2 = methods are declared typed ids (bab.experiments.methods), the papers'
# method names hold the papers' recipes, settings are typed values. Rows of an older version are not judged.
RESULTS_CONTRACT = 2

# Where a notebook run without a results_path (nbval, a notebook refresh) still writes its rows, when set: the
# smoke regression check compares them with tests/reference/smoke_rows.json (bab.report.compare.regression).
ROWS_DIR_ENV = "BAB_RESULTS_DIR"

# one result row: required keys and their types (float columns may be None)
ROW_STR_KEYS = ("experiment", "method")
ROW_FLOAT_KEYS = ("budget", "cost", "accuracy", "speedup")
ROW_OPTIONAL_KEYS = ("note",)
# optional float columns (None or absent when they do not apply): language-model perplexity, the
# KV-cache memory ratio (dense bytes / ours) of context pruning, beside a measured speed-up its analytic
# limit (dense FLOPs / ours on the same passes), the sample standard deviation of the accuracy over the seeds a row
# averages, ``value``: the one number of a method that is not an accuracy or a cost (its Method says what), and the
# 95% interval of an accuracy measured on n items (zero-shot tasks; ``accuracy_n``)
ROW_OPTIONAL_FLOAT_KEYS = ("perplexity", "memory_ratio", "analytic_limit", "accuracy_std", "value", "accuracy_low",
                           "accuracy_high", "accuracy_n")
# which trained models a row measured (``bab.experiments.study.measured_on``): their run-cache folders and seeds
ROW_RUNS_KEY, ROW_SEEDS_KEY = "runs", "seeds"
# added by save_results from the study's ledger: the commit that trained each of the row's models
# (None: stored before commits were recorded) and how many of them came from the cache rather than this run
ROW_PROVENANCE_KEYS = ("trained_at", "cache_hits")
# the values that tell a method's rows apart beyond the budget (a dict; the method declares its keys)
ROW_SETTINGS_KEY = "settings"

# -----------------------------------------------------------------------------
# the results contract: what a notebook writes


def validate_rows(rows):
    """Check result rows against the contract; return clean copies (floats as float).

    Every row names a method its experiment declares (``bab.experiments.methods``), with a budget and settings
    that fit that method. Raises ValueError naming the row index and what was wrong.
    """
    from bab.experiments.methods import method_of

    if isinstance(rows, dict) or not hasattr(rows, "__iter__"):
        raise ValueError(f"rows must be a list of dicts, got {type(rows).__name__}")
    allowed = set(ROW_STR_KEYS + ROW_FLOAT_KEYS + ROW_OPTIONAL_KEYS + ROW_OPTIONAL_FLOAT_KEYS
                  + (ROW_SETTINGS_KEY, ROW_RUNS_KEY, ROW_SEEDS_KEY) + ROW_PROVENANCE_KEYS)
    clean = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"row {i}: must be a dict, got {type(row).__name__}")
        extra = sorted(set(row) - allowed)
        if extra:
            raise ValueError(f"row {i}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")
        out = {}
        for key in ROW_STR_KEYS + ROW_FLOAT_KEYS:
            if key not in row:
                raise ValueError(f"row {i}: missing key {key!r}")
        for key in ROW_STR_KEYS:
            if not isinstance(row[key], str) or not row[key]:
                raise ValueError(f"row {i}: key {key!r} must be a non-empty str, got {row[key]!r}")
            out[key] = row[key]
        for key in ROW_FLOAT_KEYS + tuple(k for k in ROW_OPTIONAL_FLOAT_KEYS if k in row):
            value = row[key]
            if value is None:
                out[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"row {i}: key {key!r} must be a float or None, got {value!r}")
            if not math.isfinite(float(value)):
                raise ValueError(f"row {i}: key {key!r} must be finite or None, got {value!r}")
            out[key] = float(value)
        if "note" in row:
            if not isinstance(row["note"], str):
                raise ValueError(f"row {i}: key 'note' must be a str, got {row['note']!r}")
            out["note"] = row["note"]
        try:
            method = method_of(out["experiment"], out["method"])
            out["budget"] = method.check_budget(out["budget"])
            settings = method.check_settings(row.get(ROW_SETTINGS_KEY))
            if out.get("value") is not None and not method.value:
                raise ValueError(f"method {method.name!r} declares no 'value' column; leave it out, or declare what "
                                 f"it holds in the method's `value`")
            out.update(_checked_provenance(row))
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from None
        if settings:
            out[ROW_SETTINGS_KEY] = settings
        clean.append(out)
    return clean


def _checked_provenance(row) -> dict:
    """The row's ``runs`` (names) and ``seeds`` (whole numbers), and the provenance save_results adds, checked."""
    out = {}
    runs, seeds = row.get(ROW_RUNS_KEY), row.get(ROW_SEEDS_KEY)
    if runs is not None:
        if not isinstance(runs, list) or not runs or not all(isinstance(r, str) and r for r in runs):
            raise ValueError(f"{ROW_RUNS_KEY!r} must be a non-empty list of run names (Study.result_row(..., "
                             f"models=...) fills it), got {runs!r}")
        out[ROW_RUNS_KEY] = list(runs)
    if seeds is not None:
        if not isinstance(seeds, list) or not all(s is None or (isinstance(s, int) and not isinstance(s, bool))
                                                  for s in seeds):
            raise ValueError(f"{ROW_SEEDS_KEY!r} must be a list of whole numbers, got {seeds!r}")
        out[ROW_SEEDS_KEY] = list(seeds)
    if "trained_at" in row:
        trained_at = row["trained_at"]
        if not isinstance(trained_at, list) or not all(c is None or isinstance(c, str) for c in trained_at):
            raise ValueError(f"'trained_at' must be a list of commits (or None), got {trained_at!r}")
        out["trained_at"] = list(trained_at)
    if "cache_hits" in row:
        hits = row["cache_hits"]
        if not isinstance(hits, int) or isinstance(hits, bool) or not 0 <= hits <= len(runs or []):
            raise ValueError(f"'cache_hits' must count the row's runs that came from the cache, got {hits!r}")
        out["cache_hits"] = hits
    return out


def with_provenance(rows: list[dict], used: list[dict]) -> list[dict]:
    """``rows`` with, for each row that names its runs, the commits that trained them (``trained_at``, first use
    first, without repeats) and how many came from the run cache (``cache_hits``), looked up in ``used`` (a
    ledger's ``models_used()``). ValueError when a row names a run the ledger never noted."""
    by_run = {model["run"]: model for model in used}
    out = []
    for i, row in enumerate(rows):
        runs = row.get(ROW_RUNS_KEY)
        if not runs:
            out.append(row)
            continue
        unknown = [run for run in runs if run not in by_run]
        if unknown:
            raise ValueError(f"row {i} ({row['method']}) names run {unknown[0]!r}, which the studies of this ledger "
                             f"neither trained nor loaded from the run cache; pass the ledger of the study that "
                             f"trained it (study.ledger), or result_row the models this study trained")
        commits = list(dict.fromkeys(by_run[run]["commit"] for run in runs))
        out.append({**row, "trained_at": commits, "cache_hits": sum(bool(by_run[run]["cached"]) for run in runs)})
    return out


def write_json_atomic(path, obj):
    """Write obj as JSON to path via a temporary file and os.replace; create parent dirs."""
    return write_atomic(path, strict_json.dumps(obj, indent=2) + "\n")


def save_results(rows, path, ledger: RunLedger | None = None):
    """Write a notebook's result rows to `path` as {"notebook": <stem>, "contract": RESULTS_CONTRACT, "rows": rows,
    "models": ..., "measurements": ..., "code": ...}, and the per-unit outcomes ``ledger`` recorded for the rows
    beside it (``outcomes_path``). From ``ledger`` (the study's, ``bab.core.ledger``; None: an empty one, for rows
    that name no trained model): "models", the models the study trained or took from the run cache, with the commit
    that trained each, and each row that names its models gets their commits and cache hits (``with_provenance``);
    "measurements", the slow measurements it computed or read from the run cache, with the commit that measured
    each. "code" holds the digests of the ``bab`` modules the kernel loaded
    (``bab.core.provenance.loaded_code_digests``), so a record can tell when that code changed after the run.

    `path` is the `results_path` parameter papermill injects. When it is None (the notebook runs interactively,
    or under nbval) the rows go to `$BAB_RESULTS_DIR/<experiments>.json` if that variable is set, else nothing is
    written and None is returned.
    """
    if path is None:
        folder = os.environ.get(ROWS_DIR_ENV)
        if not folder:
            return None
        rows = validate_rows(rows)
        path = Path(folder) / ("+".join(sorted({row["experiment"] for row in rows})) + ".json")
    path = Path(path)
    ledger = RunLedger() if ledger is None else ledger
    used = ledger.models_used()
    clean = validate_rows(rows)
    written = write_json_atomic(path, {"notebook": path.stem, "contract": RESULTS_CONTRACT,
                                       "rows": with_provenance(clean, used), "models": used,
                                       "measurements": ledger.measurements_used(), "code": loaded_code_digests()})
    stale = outcomes_path(path)
    if outcomes.write(stale, ledger.outcomes_for(clean)) is None:
        stale.unlink(missing_ok=True)  # no row of this run has outcomes: an older run's must not pair with them
    return written


def outcomes_path(results_path) -> Path:
    """Where the per-example outcomes of a results file's rows are kept: beside it, ``<stem>.outcomes.npz``."""
    results_path = Path(results_path)
    return results_path.with_name(f"{results_path.stem}.outcomes.npz")


def read_json(path):
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(Path(path).read_text())
    return None
