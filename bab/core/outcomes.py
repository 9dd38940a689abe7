"""Per-unit outcomes of the measurements behind result rows, kept so two rows can be compared unit by unit.

An evaluation that scores test examples one by one (``bab.heads.evaluate.evaluate``, ``evaluate_vit``) returns
``outcomes``: whether each example was right, in the data's order. When a study turns that evaluation into a
result row it records the outcomes in its ledger under the row's key (``outcome_key``, ``bab.core.ledger``);
``save_results`` writes those of the rows it saves beside them (``<notebook>.outcomes.npz``), and the claims pair two
rows on the same examples (``bab.core.statistics.paired_difference``). A perplexity row keeps each window's
log-likelihood and a speed row each repeat's times (``KINDS``), for intervals over windows and repeats.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

# What a row's per-unit measurements can be, besides whether each test example was right ("correct", bool): the
# summed negative log-likelihood and the token count of each held-out window (a perplexity), the dense and the
# method's time of each interleaved repeat (a speed-up), the pruned and all (query, layer) pairs of a kind of token
# in each window (a share pruned), floats; and which units they were ("unit_ids", int64 fingerprints of each test
# example's or window's content), so two rows are paired on the same units.
KINDS = ("correct", "window_nll", "window_tokens", "dense_ms", "ms", "window_pruned", "window_pairs", "unit_ids")


def unit_ids(inputs, labels=None) -> np.ndarray:
    """One int64 fingerprint per unit (row of ``inputs``: a test example's token ids or pixels, a window's tokens;
    or one text of a list of texts), with its label where given: the same content gets the same id on any
    machine, in any order, so two rows' outcomes can be matched unit by unit (``align``) however each evaluation
    ordered or subsampled its data."""
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(text, str) for text in inputs):
        inputs = [np.frombuffer(text.encode(), dtype=np.uint8) for text in inputs]
        return np.array([unit_ids(text[None], None if labels is None else np.asarray(labels)[i:i + 1])[0]
                         for i, text in enumerate(inputs)], dtype=np.int64)
    inputs = np.ascontiguousarray(_numpy(inputs))
    if inputs.ndim == 0 or len(inputs) == 0:
        raise ValueError(f"unit_ids needs [units, ...] inputs, got shape {inputs.shape}")
    rows = inputs.reshape(len(inputs), -1)
    labels = None if labels is None else _numpy(labels).reshape(len(inputs), -1)
    ids = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        digest = hashlib.blake2b(row.tobytes(), digest_size=8)
        if labels is not None:
            digest.update(labels[i].tobytes())
        ids[i] = np.frombuffer(digest.digest(), dtype=np.int64)[0]
    return ids


def _numpy(values) -> np.ndarray:
    return values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)


def align(arrays: list[np.ndarray], ids: list[np.ndarray | None]) -> list[np.ndarray] | None:
    """``arrays`` (each [units] or [seeds, units]) in one order of units, or None when they were not measured on
    the same units. With every array's ``ids`` the units are matched by id (the same set, in any order) and put in
    the order of their ids, so the result does not depend on the order each evaluation scored them in; where an id
    is missing the arrays must be equally long and are taken to be in the same order."""
    if any(i is None for i in ids):
        return arrays if len({a.shape[-1] for a in arrays}) == 1 else None
    reference = np.sort(np.asarray(ids[0]))
    if np.any(reference[1:] == reference[:-1]):
        return None  # duplicated test examples: matching by id would be ambiguous
    aligned = []
    for array, own in zip(arrays, ids, strict=True):
        own = np.asarray(own)
        if own.shape != reference.shape or array.shape[-1] != own.size:
            return None
        order = np.argsort(own, kind="stable")
        if not np.array_equal(own[order], reference):
            return None
        aligned.append(array[..., order])
    return aligned


# The attribute of a table of evaluations (one row each) that keeps each row's per-unit measurements, in row order,
# out of its columns (arrays in cells would be displayed and written as text).
UNITS = "units"


class _Units(dict):
    """The per-unit measurements of a table's rows, by the row's index label. Compared by identity: pandas compares
    the attrs of the tables it joins, and arrays compared with == give no single truth value."""

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = None


def keep_units(table, evaluations: list[dict]):
    """``table`` (one row per evaluation of ``evaluations``, in order) with their per-unit measurements kept in
    ``table.attrs["units"]`` by row label, so a selection of the table's rows still finds its own (``row_units``);
    returns ``table``."""
    table.attrs[UNITS] = _Units((label, {kind: e[kind] for kind in ("outcomes", *KINDS[1:]) if e.get(kind) is not None})
                                for label, e in zip(table.index, evaluations, strict=True))
    return table


def row_units(table, label) -> dict:
    """The per-unit measurements ``keep_units`` kept for the row labelled ``label`` of ``table`` (or of a selection
    of its rows), as a result row's stats take them ({} for a table that kept none)."""
    units = getattr(table, "attrs", {}).get(UNITS)
    return {} if units is None else dict(units[label])


def outcome_key(row: dict, kind: str = "correct") -> str:
    """The key of a result row's outcomes of ``kind``: experiment, method, budget, settings and the seeds of its
    models (so the same method's rows of two seed runs of a notebook stay apart)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    budget = row.get("budget")
    key = [row["experiment"], row["method"], None if budget is None else round(float(budget), 4),
           sorted((row.get("settings") or {}).items()), sorted(row.get("seeds") or [])]
    return json.dumps(key if kind == "correct" else [*key, kind])


def write(path, outcomes: dict[str, np.ndarray]) -> Path | None:
    """Write ``outcomes`` to ``path`` (a compressed .npz: the keys as one array, each distinct array once, so the
    rows scored on one test set share its unit ids, booleans bit-packed) without leaving a partial file behind;
    nothing (None) for none."""
    if not outcomes:
        return None
    path = Path(path)
    keys = list(outcomes)
    stored, slot, by_content = {}, [], {}
    for key in keys:
        array = outcomes[key]
        content = (array.dtype.str, array.shape, hashlib.blake2b(array.tobytes()).hexdigest())
        if content not in by_content:
            by_content[content] = len(by_content)
            stored[f"o{by_content[content]}"] = np.packbits(array, axis=-1) if array.dtype == bool else array
        slot.append(by_content[content])
    shapes = np.array([list(outcomes[key].shape) + [0] * (2 - outcomes[key].ndim) for key in keys])
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        np.savez_compressed(handle, keys=np.array(keys), shapes=shapes, slots=np.array(slot), **stored)
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
            slot = int(stored["slots"][i]) if "slots" in stored else i  # files written before arrays were shared
            array = stored[f"o{slot}"]
            found[key] = (np.unpackbits(array, axis=-1, count=shape[-1]).astype(bool).reshape(shape)
                          if array.dtype == np.uint8 else array)
        return found
