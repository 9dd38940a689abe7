"""Per-unit outcomes of the measurements behind result rows, kept so two rows can be compared unit by unit.

An evaluation that scores test examples one by one (``bab.heads.evaluate.evaluate``, ``evaluate_vit``) returns
``outcomes``: whether each example was right, in the data's order. When a study turns that evaluation into a
result row it records the outcomes here under the row's key (``outcome_key``); ``save_results`` writes those of
the rows it saves beside them (``<notebook>.outcomes.npz``), and the claims pair two rows on the same examples
(``bab.core.statistics.paired_difference``). A perplexity row keeps each window's log-likelihood and a speed row each
repeat's times (``KINDS``), for intervals over windows and repeats. The register lives for the kernel, as the run
cache's record of the models it used does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

_RECORDED: dict[str, np.ndarray] = {}


# What a row's per-unit measurements can be, besides whether each test example was right ("correct", bool): the
# summed negative log-likelihood and the token count of each held-out window (a perplexity), and the dense and the
# method's time of each interleaved repeat (a speed-up), floats.
KINDS = ("correct", "window_nll", "window_tokens", "dense_ms", "ms")


def outcome_key(row: dict, kind: str = "correct") -> str:
    """The key of a result row's outcomes of ``kind``: experiment, method, budget, settings and the seeds of its
    models (so the same method's rows of two seed runs of a notebook stay apart)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    budget = row.get("budget")
    key = [row["experiment"], row["method"], None if budget is None else round(float(budget), 4),
           sorted((row.get("settings") or {}).items()), sorted(row.get("seeds") or [])]
    return json.dumps(key if kind == "correct" else [*key, kind])


def record(row: dict, outcomes, kind: str = "correct") -> int:
    """Keep ``outcomes`` ([units], or [seeds, units] for a row averaging several models on the same units) of
    ``kind`` for ``row``; returns the number of units (test examples, windows, repeats)."""
    array = np.asarray(outcomes, dtype=bool if kind == "correct" else float)
    if array.ndim not in (1, 2) or array.shape[-1] == 0:
        raise ValueError(f"outcomes must be [units] or [seeds, units], got shape {array.shape}")
    _RECORDED[outcome_key(row, kind)] = array
    return int(array.shape[-1])


def recorded_for(rows) -> dict[str, np.ndarray]:
    """The recorded outcomes of every kind of ``rows`` (those that have any), by key."""
    keys = [outcome_key(row, kind) for row in rows for kind in KINDS]
    return {key: _RECORDED[key] for key in keys if key in _RECORDED}


def clear() -> None:
    _RECORDED.clear()


def write(path, outcomes: dict[str, np.ndarray]) -> Path | None:
    """Write ``outcomes`` to ``path`` (a compressed .npz: the keys as one array, each row's outcomes bit-packed)
    without leaving a partial file behind; nothing (None) for none."""
    if not outcomes:
        return None
    path = Path(path)
    keys = list(outcomes)
    arrays = {f"o{i}": np.packbits(outcomes[key], axis=-1) if outcomes[key].dtype == bool else outcomes[key]
              for i, key in enumerate(keys)}
    shapes = np.array([list(outcomes[key].shape) + [0] * (2 - outcomes[key].ndim) for key in keys])
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        np.savez_compressed(handle, keys=np.array(keys), shapes=shapes, **arrays)
    os.replace(partial, path)
    return path


def read(path) -> dict[str, np.ndarray]:
    """The outcomes ``write`` stored in ``path`` ({} when there is no such file)."""
    path = Path(path)
    if not path.is_file():
        return {}
    with np.load(path) as stored:
        found = {}
        for i, key in enumerate(stored["keys"].tolist()):
            shape = tuple(int(s) for s in stored["shapes"][i] if s)
            array = stored[f"o{i}"]
            found[key] = (np.unpackbits(array, axis=-1, count=shape[-1]).astype(bool).reshape(shape)
                          if array.dtype == np.uint8 else array)
        return found
