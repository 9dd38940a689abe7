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

# one result row: required keys and their types (float columns may be None)
ROW_STR_KEYS = ("experiment", "method")
ROW_FLOAT_KEYS = ("budget", "cost", "accuracy", "speedup")
ROW_OPTIONAL_KEYS = ("note",)
# optional float columns (None or absent when they do not apply): language-model perplexity and the
# KV-cache memory ratio (dense bytes / ours) of context pruning
ROW_OPTIONAL_FLOAT_KEYS = ("perplexity", "memory_ratio")

# -----------------------------------------------------------------------------
# the results contract: what a notebook writes


def validate_rows(rows):
    """Check result rows against the contract; return clean copies (floats as float).

    Raises ValueError naming the row index and the offending key.
    """
    if isinstance(rows, dict) or not hasattr(rows, "__iter__"):
        raise ValueError(f"rows must be a list of dicts, got {type(rows).__name__}")
    allowed = set(ROW_STR_KEYS + ROW_FLOAT_KEYS + ROW_OPTIONAL_KEYS + ROW_OPTIONAL_FLOAT_KEYS)
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
    """Write a notebook's result rows to `path` as {"notebook": <stem>, "rows": rows}.

    `path` is the `results_path` parameter papermill injects; when it is None (the notebook
    runs interactively) nothing is written and None is returned.
    """
    if path is None:
        return None
    path = Path(path)
    return write_json_atomic(path, {"notebook": path.stem, "rows": validate_rows(rows)})


def now_iso():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def read_json(path):
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(Path(path).read_text())
    return None
