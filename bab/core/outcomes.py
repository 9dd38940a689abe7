"""Per-example outcomes of the evaluations behind result rows, kept so two rows can be compared example by example.

An evaluation that scores test examples one by one (``bab.heads.evaluate.evaluate``, ``evaluate_vit``) returns
``outcomes``: whether each example was right, in the data's order. When a study turns that evaluation into a
result row it records the outcomes here under the row's key (``outcome_key``); ``save_results`` writes those of
the rows it saves beside them (``<notebook>.outcomes.npz``), and the claims pair two rows on the same examples
(``bab.core.statistics.paired_difference``). The register lives for the kernel, as the run cache's record of the
models it used does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

_RECORDED: dict[str, np.ndarray] = {}


def outcome_key(row: dict) -> str:
    """The key of a result row's outcomes: experiment, method, budget, settings and the seeds of its models (so the
    same method's rows of two seed runs of a notebook stay apart)."""
    budget = row.get("budget")
    return json.dumps([row["experiment"], row["method"], None if budget is None else round(float(budget), 4),
                       sorted((row.get("settings") or {}).items()), sorted(row.get("seeds") or [])])


def record(row: dict, outcomes) -> int:
    """Keep ``outcomes`` ([examples], or [seeds, examples] for a row averaging several models on the same examples)
    for ``row``; returns the number of examples."""
    array = np.asarray(outcomes, dtype=bool)
    if array.ndim not in (1, 2) or array.shape[-1] == 0:
        raise ValueError(f"outcomes must be [examples] or [seeds, examples], got shape {array.shape}")
    _RECORDED[outcome_key(row)] = array
    return int(array.shape[-1])


def recorded_for(rows) -> dict[str, np.ndarray]:
    """The recorded outcomes of ``rows`` (those that have any), by key."""
    keys = [outcome_key(row) for row in rows]
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
    arrays = {f"o{i}": np.packbits(outcomes[key], axis=-1) for i, key in enumerate(keys)}
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
            found[key] = np.unpackbits(stored[f"o{i}"], axis=-1, count=shape[-1]).astype(bool).reshape(shape)
        return found
