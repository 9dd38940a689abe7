"""What a study used and measured, for the results it saves: a ``RunLedger``.

Each study owns one (``Study.ledger``; the studies of one notebook share it, ``ledger=`` when building the second)
and records into it as it works: the models it trained or took from the run cache (``bab.core.runs.train_cached``),
the slow measurements it computed or read (``RunCache.measured``), and the per-unit outcomes behind each result row
it builds (``bab.core.outcomes``). ``save_results`` / ``finish_notebook`` take the ledger with the rows and write
its record beside them. An object handed along rather than a register of the process, so two studies in one
process (or two tests) never see each other's record.
"""

from __future__ import annotations

import numpy as np

from bab.core.outcomes import KINDS, outcome_key


class RunLedger:
    def __init__(self):
        self._models: dict[str, dict] = {}  # by run-cache folder name, first use first
        self._measurements: dict[str, dict] = {}  # by measurement file name, first use first
        self._outcomes: dict[str, np.ndarray] = {}  # by outcome_key

    def note_model(self, run: str, metrics: dict, cached: bool) -> None:
        """A model trained here (``cached`` False) or taken from the run cache, with the provenance stored with it.
        A model trained here and loaded again later stays "trained here"."""
        trained_by = metrics.get("trained_by") or {}
        self._models.setdefault(run, {
            "run": run, "cached": cached, "commit": trained_by.get("commit"),
            "started_at": trained_by.get("started_at"), "train_seconds": metrics.get("train_seconds"), "seed": None})

    def note_seed(self, run: str, seed: int) -> None:
        self._models[run]["seed"] = seed

    def note_measurement(self, record: dict) -> None:
        self._measurements.setdefault(record["measurement"], record)

    def models_used(self) -> list[dict]:
        """The models noted, in order of first use: ``run`` (the cache folder's name), ``cached`` (True: trained by an
        earlier process), ``commit`` and ``started_at`` (of the run that trained it; None for a run stored before
        they were recorded), ``train_seconds`` and ``seed`` (None when not trained through ``train_cached``)."""
        return [dict(record) for record in self._models.values()]

    def measurements_used(self) -> list[dict]:
        """The measurements noted, in order of first use: ``measurement`` (the file's name), ``cached`` (True:
        measured by an earlier process), ``commit``, ``measured_at`` and ``seconds`` (of the process that measured
        it)."""
        return [dict(record) for record in self._measurements.values()]

    def record(self, row: dict, outcomes, kind: str = "correct") -> int:
        """Keep ``outcomes`` ([units], or [seeds, units] for a row averaging several models on the same units) of
        ``kind`` for ``row``; returns the number of units (test examples, windows, repeats)."""
        dtype = {"correct": bool, "unit_ids": np.int64}.get(kind, float)
        array = np.asarray(outcomes, dtype=dtype)
        if array.ndim not in (1, 2) or array.shape[-1] == 0:
            raise ValueError(f"outcomes must be [units] or [seeds, units], got shape {array.shape}")
        self._outcomes[outcome_key(row, kind)] = array
        return int(array.shape[-1])

    def outcomes_for(self, rows) -> dict[str, np.ndarray]:
        """The recorded outcomes of every kind of ``rows`` (those that have any), by key."""
        keys = [outcome_key(row, kind) for row in rows for kind in KINDS]
        return {key: self._outcomes[key] for key in keys if key in self._outcomes}
