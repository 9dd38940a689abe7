"""JSON that every parser reads: NaN and infinities become ``null``, never the bare ``NaN`` Python writes.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default, which ``JSON.parse``,
``jq`` and most other readers reject. ``dumps`` first turns every non-finite float (also inside
numpy / torch values and pandas' missing values) into ``None``, then serialises with
``allow_nan=False``, so a value that slips past the conversion raises instead of writing bad JSON.
"""

from __future__ import annotations

import json
import math

MISSING_TYPES = ("NAType", "NaTType")  # pandas' missing values, matched by name so core needs no pandas


def finite(value):
    """``value`` with NaN / inf floats replaced by None, recursively; numpy and torch values as Python ones."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    if type(value).__name__ in MISSING_TYPES:
        return None
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalars and arrays, tensors
        return finite(value.tolist())
    return value


def dumps(obj, default=None, **kwargs) -> str:
    """``json.dumps`` of ``finite(obj)`` with ``allow_nan=False``; ``default`` converts other objects (then checked)."""
    return json.dumps(finite(obj), allow_nan=False, default=None if default is None else _finite_default(default),
                      **kwargs)


def _finite_default(default):
    def convert(value):
        return finite(default(value))

    return convert
