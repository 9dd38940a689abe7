"""Resumable checkpoints of a training run: where they are kept and how often (``Checkpointer``), stopping at a
signal after the current step (``StopSignals``), and the random states a resumed run restores."""

from __future__ import annotations

import os
import random
import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

CHECKPOINT_FORMAT = 1


@dataclass
class Checkpointer:
    """Where the loop keeps a run's resumable checkpoint, and how often it writes it (every ``every_steps``
    optimizer steps, or once ``every_seconds`` have passed since the last write, whichever comes first; the first
    write comes after ``first_seconds``, so a run killed in its first minutes still resumes).

    A checkpoint is written to a temporary file and renamed into place, so a kill while writing leaves the
    previous one intact. Whoever stores the finished model calls ``clear()``."""

    path: Path
    label: str = "run"  # how the resume message names the run
    every_steps: int | None = None
    every_seconds: float = 300.0
    first_seconds: float = 60.0

    def __post_init__(self):
        self.path = Path(self.path)
        if self.every_steps is not None and self.every_steps < 1:
            raise ValueError(f"every_steps must be >= 1 (or None), got {self.every_steps}")
        if self.every_seconds <= 0 or self.first_seconds <= 0:
            raise ValueError(f"every_seconds and first_seconds must be > 0, got {self.every_seconds}, "
                             f"{self.first_seconds}")

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        state = torch.load(self.path, weights_only=False, map_location="cpu")
        if state.get("format") != CHECKPOINT_FORMAT:
            return None  # written by another version of the loop: start again rather than resume wrongly
        return state

    def save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        torch.save({**state, "format": CHECKPOINT_FORMAT}, tmp)
        os.replace(tmp, self.path)

    def for_process(self, index: int, count: int) -> Checkpointer:
        """The checkpoint of process ``index`` of ``count``: each process of an ``accelerate launch`` keeps its
        own file, since its random states (dropout, its shard's order) are its own."""
        if count == 1:
            return self
        return replace(self, path=self.path.with_name(f"{self.path.stem}.process{index}of{count}{self.path.suffix}"))

    def clear(self) -> None:
        for path in self.path.parent.glob(f"{self.path.stem}.process*{self.path.suffix}"):
            path.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()  # the run's own folder in the partial area, when now empty
        except OSError:
            pass


class StopSignals:
    """SIGINT / SIGTERM during a checkpointed run: remember the signal, let the current step finish, then the
    loop writes a checkpoint and stops (KeyboardInterrupt for SIGINT, exit status 128 + 15 for SIGTERM)."""

    def __init__(self, active: bool):
        self.active = active and threading.current_thread() is threading.main_thread()
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self):
        if self.active:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._remember)
        return self

    def _remember(self, signum, frame):
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def stop(self):
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt("training interrupted; its checkpoint is written, the same call resumes it")
        raise SystemExit(128 + signal.SIGTERM)


def random_states(rng: random.Random) -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "objective": rng.getstate()}


def restore_random_states(states: dict, rng: random.Random) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    rng.setstate(states["objective"])
