"""The results contract: the rows a notebook hands to the report.

A notebook calls ``save_results(rows, results_path)`` with ``results_path`` the parameter that
papermill injects; each row names an experiment, a method, a budget, the cost, the accuracy
and the measured speed-up (optional: perplexity, memory ratio, a note). The report merges the
rows and puts them next to the papers' numbers (``bab.report.paper.comparison_table``).
"""

import contextlib
import datetime
import json
import math
import numbers
import os
import tempfile
from pathlib import Path

from bab.core import strict_json
from bab.core.folders import current_umask
from bab.core.runs import models_used

# The version of the rows' meaning: 2 = methods are declared typed ids (bab.experiments.methods), the papers'
# method names hold the papers' recipes, settings are typed values. Rows of an older version are not judged.
RESULTS_CONTRACT = 2

# Where a notebook run without a results_path (nbval, a notebook refresh) still writes its rows, when set: the
# smoke regression check compares them with tests/reference/smoke_rows.json (bab.report.regression).
ROWS_DIR_ENV = "BAB_RESULTS_DIR"

# one result row: required keys and their types (float columns may be None)
ROW_STR_KEYS = ("experiment", "method")
ROW_FLOAT_KEYS = ("budget", "cost", "accuracy", "speedup")
ROW_OPTIONAL_KEYS = ("note",)
# optional float columns (None or absent when they do not apply): language-model perplexity, the
# KV-cache memory ratio (dense bytes / ours) of context pruning, and beside a measured speed-up its analytic
# limit (dense FLOPs / ours on the same passes)
ROW_OPTIONAL_FLOAT_KEYS = ("perplexity", "memory_ratio", "analytic_limit")
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
    allowed = set(ROW_STR_KEYS + ROW_FLOAT_KEYS + ROW_OPTIONAL_KEYS + ROW_OPTIONAL_FLOAT_KEYS + (ROW_SETTINGS_KEY,))
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
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from None
        if settings:
            out[ROW_SETTINGS_KEY] = settings
        clean.append(out)
    return clean


def write_json_atomic(path, obj):
    """Write obj as JSON to path via a temporary file and os.replace; create parent dirs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "w") as f:
            f.write(strict_json.dumps(obj, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def save_results(rows, path):
    """Write a notebook's result rows to `path` as {"notebook": <stem>, "contract": RESULTS_CONTRACT, "rows": rows,
    "models": ...}, where "models" are the models this kernel trained or took from the run cache, with the commit
    that trained each (``bab.core.runs.models_used``).

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
    return write_json_atomic(path, {"notebook": path.stem, "contract": RESULTS_CONTRACT, "rows": validate_rows(rows),
                                    "models": models_used()})


def now_iso():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def read_json(path):
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(Path(path).read_text())
    return None
