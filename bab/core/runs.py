"""A run cache: trained checkpoints (safetensors) and their metrics, keyed by the config.

A run lives in ``<root>/<name>-<key>/`` with ``model.safetensors``, ``metrics.json`` and ``config.json``. The key
is a SHA-256 of the canonical JSON of the config, each config dataclass in it written as its difference from its
first defaults (``config_difference``: an option added later keeps old keys). On load the stored config must equal
the requested one exactly, so a key collision or a hand-edited folder can never hand back a checkpoint trained for
something else. Runs are written into a temporary folder and renamed into place, so a crash never leaves half a run
behind.

The root is ``$BAB_CACHE_DIR``, else ``.bab_cache/runs`` in a source checkout, else the user's cache folder.

``train_cached`` is how the studies train: it adds the method's code version to the key (each method
package's ``TRAINING_VERSION``), seeds, builds the model and trains it on a miss.

``RunCache.measured`` keeps slow measurements of cached models the same way (JSON under
``<root>/measurements/``, keyed by the measured run, what was measured and the code version), so a notebook
whose evaluation alone takes hours (notebook 07 at its record profile) resumes after an interruption and can
have its evaluations run ahead, one model at a time, as its models finish training.

Several processes may share one cache (two notebooks of a report at once, ``python -m bab train`` beside a
notebook): a run is trained by one of them at a time (``RunCache.training_lock``), and the others wait and load it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

try:
    import fcntl
except ImportError:  # Windows: runs are not locked there
    fcntl = None

from bab.core import strict_json
from bab.core.blas import blas_key
from bab.core.checkpoints import Checkpointer
from bab.core.device import device_key
from bab.core.folders import share, write_atomic
from bab.core.ledger import RunLedger
from bab.core.memory import release_freed_memory
from bab.core.provenance import git_commit, now_iso
from bab.core.training import distributed_state, seed_everything

# Bump when a change to the code makes old checkpoints mean something different.
CACHE_SCHEMA = 1
PARTIAL = "partial"  # the folder of unfinished runs' resumable checkpoints, under the cache root
MEASUREMENTS = "measurements"  # the folder of cached measurements (RunCache.measured), under the cache root
CONVERTED = "converted"  # the folder of downloaded models converted for faster loading (bab.context.gguf_copy)

# The defaults run keys are differences from (``config_difference``): a field's entry is written once, when the
# field is added, and never edited afterwards.
FIRST_DEFAULTS = Path(__file__).with_name("first_defaults.json")

# The attribute ``train_cached`` sets on the model it returns: {"run": the cache folder's name, "seed": the seed it
# was built and trained with}. A result row names the models it measured by it (``run_of``).
RUN_TAG = "bab_run"


def run_of(model: torch.nn.Module) -> dict:
    """``{"run", "seed"}`` of a model ``train_cached`` returned (or a copy of one): which cached run a result row
    measured. ValueError when the model did not come from the run cache."""
    tag = getattr(model, RUN_TAG, None)
    if not isinstance(tag, dict):
        raise ValueError(f"{type(model).__name__} did not come from the run cache, so a result row cannot name the "
                         f"run that trained it: train it through Study.train_cached / bab.core.runs.train_cached, "
                         f"or pass the model it was derived from")
    return dict(tag)


def as_downloaded(model: torch.nn.Module) -> torch.nn.Module:
    """Mark a model used as downloaded, with no training of ours: result rows measured on it name no run."""
    setattr(model, RUN_TAG, {"run": None, "seed": None})
    return model


def tag_as(part: torch.nn.Module, model: torch.nn.Module) -> torch.nn.Module:
    """Mark ``part`` (a module inside ``model``, or a plain copy of it) as ``model``'s run, so result rows measured
    on it name the run that trained it (``run_of``). Returns ``part``."""
    setattr(part, RUN_TAG, run_of(model))
    return part


def default_cache_root(package_dir: Path | None = None) -> Path:
    """``$BAB_CACHE_DIR``; else ``.bab_cache/runs`` at the root of a source checkout of bab (the folder with
    ``pyproject.toml`` beside the package); else the user's cache folder, ``$XDG_CACHE_HOME`` or ``~/.cache``,
    under ``bab/runs``. Never inside an installed package (site-packages is no place for checkpoints)."""
    env = os.environ.get("BAB_CACHE_DIR")
    if env:
        return Path(env)
    package_dir = Path(package_dir or Path(__file__).resolve().parents[1])
    checkout = package_dir.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".bab_cache" / "runs"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bab" / "runs"


def canonical(config) -> str:
    """Canonical JSON of a run's config: sorted keys, no whitespace. ``config`` is plain data (dicts, lists,
    numbers, strings) in which config dataclasses may sit anywhere; each stands for its difference from its first
    defaults (``config_difference``)."""
    try:
        return json.dumps({"schema": CACHE_SCHEMA, "config": config}, sort_keys=True, separators=(",", ":"),
                          allow_nan=False, default=_difference_or_fail)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"run config must be JSON-serialisable plain data (dicts, lists, numbers, strings) or "
                         f"config dataclasses: {exc}") from exc


def _difference_or_fail(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_difference(value)
    raise TypeError(f"{type(value).__name__} is not plain data")


def plain(config):
    """``config`` as the plain data its key is computed from (config dataclasses as their differences)."""
    return json.loads(canonical(config))["config"]


@functools.cache
def first_defaults() -> dict:
    """{config class name: {field: the default it had when it was added}}, from ``FIRST_DEFAULTS``."""
    return json.loads(FIRST_DEFAULTS.read_text())


def config_difference(config, defaults: dict | None = None) -> dict:
    """The fields of the config dataclass ``config`` whose values differ from their first defaults, as plain data
    (a nested config as its own difference; tuples as lists): what keys a run.

    A run is keyed by its difference from the *first* defaults (``first_defaults()``, the values recorded in
    ``FIRST_DEFAULTS`` as each field was added), not from the class's current ones, in the spirit of transformers'
    ``to_diff_dict``: an option added with the default that computes what the code computed before leaves every
    cached run's key as it was, and a default changed in the code shows in the keys of the runs that use it, so
    they retrain instead of being served a checkpoint trained under the old default. Fields without a default are
    always keyed. A class or defaulted field missing from the record raises, saying what to record."""
    defaults = first_defaults() if defaults is None else defaults
    name = type(config).__name__
    recorded = defaults.get(name)
    if recorded is None:
        raise KeyError(f"config class {name} has no first defaults recorded in {FIRST_DEFAULTS.name}, so runs "
                       f"cannot be keyed by it: add {name!r}: {json.dumps(current_defaults(type(config)))} there")
    difference = {}
    for field in dataclasses.fields(config):
        value = _plain_value(getattr(config, field.name), defaults)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            difference[field.name] = value  # a field without a default is always given, so always keyed
            continue
        if field.name not in recorded:
            raise KeyError(f"{name}.{field.name} has no first default recorded in {FIRST_DEFAULTS.name}: record the "
                           f"value with which {name} computes what it computed before the field existed (usually "
                           f"its default, {json.dumps(current_defaults(type(config)).get(field.name))})")
        if value != recorded[field.name]:
            difference[field.name] = value
    return difference


def current_defaults(config_class) -> dict:
    """{field: its current default, as plain data} of a config dataclass (what a new ``FIRST_DEFAULTS`` entry
    records); a field without a default is left out."""
    fields = dataclasses.fields(config_class)
    return {f.name: _plain_value(f.default_factory() if f.default is dataclasses.MISSING else f.default,
                                 first_defaults())
            for f in fields if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


def _plain_value(value, defaults: dict):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_difference(value, defaults)
    if isinstance(value, (tuple, list)):
        return [_plain_value(item, defaults) for item in value]
    if isinstance(value, dict):
        return {key: _plain_value(item, defaults) for key, item in value.items()}
    return value


def config_key(config) -> str:
    return hashlib.sha256(canonical(config).encode()).hexdigest()[:20]


class RunCache:
    def __init__(self, root: str | os.PathLike | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else default_cache_root()
        self.enabled = enabled

    def path(self, name: str, config) -> Path:
        if not name or any(c in name for c in "/\\") or name.startswith("."):
            raise ValueError(f"run name must be a plain file name, got {name!r}")
        return self.root / f"{name}-{config_key(config)}"

    def checkpointer(self, name: str, config) -> Checkpointer | None:
        """Where an unfinished run of ``name`` / ``config`` keeps its resumable checkpoint: the partial area
        ``<root>/partial/<name>-<key>/`` (None when the cache is off). ``$BAB_CHECKPOINT_SECONDS`` sets how often
        it is written (default every 5 minutes, the first time after one)."""
        if not self.enabled:
            return None
        seconds = float(os.environ.get("BAB_CHECKPOINT_SECONDS", 300))
        return Checkpointer(self.root / PARTIAL / self.path(name, config).name / "checkpoint.pt", label=name,
                            every_seconds=seconds, first_seconds=min(60.0, seconds))

    def load(self, name: str, config, model: torch.nn.Module) -> dict | None:
        """Fill ``model`` from the cached run and return its metrics, or None when not cached."""
        if not self.enabled:
            return None
        folder = self.path(name, config)
        try:
            stored = (folder / "config.json").read_text()
        except FileNotFoundError:
            return None
        if stored != canonical(config):
            return None  # same key, different config: never reuse it
        load_model(model, folder / "model.safetensors")
        return json.loads((folder / "metrics.json").read_text())

    def save(self, name: str, config, model: torch.nn.Module, metrics: dict) -> Path:
        folder = self.path(name, config)
        if not self.enabled:
            return folder
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.root))
        try:
            save_model(model, tmp / "model.safetensors")  # tied weights (GPT-2's head and embedding) stored once
            (tmp / "metrics.json").write_text(strict_json.dumps(metrics, indent=2, sort_keys=True))
            (tmp / "config.json").write_text(canonical(config))
            share(tmp)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder

    def get_or_train(self, name: str, config, model: torch.nn.Module, train_fn,
                     ledger: RunLedger | None = None) -> dict:
        """Load ``model`` from the cache, or run ``train_fn(model, checkpoint) -> metrics`` and store the result;
        ``ledger`` notes which it was.

        ``checkpoint`` is this run's ``Checkpointer`` in the partial area (None when the cache is off): a
        training loop given it resumes an interrupted run. It is cleared once the finished run is stored.
        Under ``accelerate launch`` every process trains (the same model) and the main process stores it; the
        others wait for it. Returns the metrics with ``"cached": True/False`` added (not stored).
        """
        folder = self.path(name, config)
        metrics = self.load(name, config, model)
        if metrics is None:
            with self.training_lock(name, config):
                metrics = self.load(name, config, model)  # stored by the process this one waited for
                if metrics is None:
                    return _noted(ledger, folder, self._train(name, config, model, train_fn))
        return _noted(ledger, folder, {**metrics, "cached": True})

    def _train(self, name: str, config, model: torch.nn.Module, train_fn) -> dict:
        checkpoint = self.checkpointer(name, config)
        # the checkout as training starts: a training of hours must not take the commit the checkout has moved to
        commit, started, t0 = git_commit(), now_iso(), time.perf_counter()
        metrics = train_fn(model, checkpoint)
        # which code trained it, when, and how long the sitting that finished it took (stored with the model)
        metrics = {**metrics, "trained_by": {"commit": commit, "started_at": started,
                                             "wall_seconds": round(time.perf_counter() - t0, 1)}}
        state = distributed_state()
        if state.is_main_process:
            self.save(name, config, model, metrics)
            if checkpoint is not None:
                checkpoint.clear()
        state.wait_for_everyone()
        return {**metrics, "cached": False}

    @contextlib.contextmanager
    def training_lock(self, name: str, config):
        """Hold the right to train run ``name`` / ``config``. A second process asking for the same run waits here
        until the first has stored it, then loads it: training it beside the first would double the work and let
        two training loops write one resumable checkpoint. An advisory lock (``flock``) on
        ``<root>/partial/<run>.lock``, which the system releases when its process ends, however it ends; the holder
        removes the file as it lets go, and a waiter that then finds its file gone locks the path anew, so no lock
        file is left behind a finished run. No lock with the cache off, without ``fcntl`` (Windows), or under
        ``accelerate launch`` with several processes (they train one model together; a lock would hold one of them
        back from the others)."""
        if not self.enabled or fcntl is None or distributed_state().num_processes > 1:
            yield
            return
        path = self.root / PARTIAL / f"{self.path(name, config).name}.lock"
        handle = _acquire(path, name)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still held: a waiter on this file sees it gone and starts over
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    def measurement_path(self, name: str, config) -> Path:
        return self.root / MEASUREMENTS / f"{self.path(name, config).name}.json"

    def measured(self, name: str, config, measure, ledger: RunLedger | None = None) -> dict:
        """``measure() -> dict`` (plain JSON data: numbers, strings, lists, dicts), or its stored result for the same
        ``name`` and ``config``.

        ``config`` must determine the result: the measured model's run (its cache folder's name, which holds its
        whole lineage), the data, what is measured and how, and the code's version. The result always comes back
        as its JSON round trip, so a measurement reads the same whether computed now or loaded (tuples as lists).
        With the cache off it is computed every time. The stored file also says which commit measured it and
        when, and ``ledger`` notes it (``RunLedger.measurements_used``)."""
        if not self.enabled:
            return json.loads(strict_json.dumps(measure()))
        path = self.measurement_path(name, config)
        try:
            stored = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            stored = None
        if stored is not None and canonical(stored.get("config")) == canonical(config):
            if ledger is not None:
                ledger.note_measurement({"measurement": path.name, "cached": True, **stored["measured_by"]})
            return stored["result"]
        commit, started, t0 = git_commit(), now_iso(), time.perf_counter()  # the checkout as the measurement starts
        result = json.loads(strict_json.dumps(measure()))
        measured_by = {"commit": commit, "measured_at": started, "seconds": round(time.perf_counter() - t0, 1)}
        if distributed_state().is_main_process:
            write_atomic(path, strict_json.dumps({"config": plain(config), "result": result,
                                                  "measured_by": measured_by}, indent=1, sort_keys=True))
        if ledger is not None:
            ledger.note_measurement({"measurement": path.name, "cached": False, **measured_by})
        return result


def _acquire(path: Path, name: str):
    """The open, exclusively locked lock file at ``path`` (waiting for its holder, saying so once), checked to be
    the file the path names now: a holder that finished removed its file, so the lock taken on it is let go and
    the path locked again."""
    said = False
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not said:
                print(f"{name}: another process is training run {path.stem}; waiting for it to finish", flush=True)
                said = True
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            return handle
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


class CacheMiss(LookupError):
    """A ``LoadOnlyRunCache`` has no run for the requested config (it never trains one)."""


class LoadOnlyRunCache(RunCache):
    """A run cache that loads and never trains: a miss raises ``CacheMiss`` instead of calling ``train_fn``.

    For tools that time or inspect a study's models (``python -m bab bench sparse --model trained``): training
    as a side effect would take minutes and write into the cache, and a user asking for "the trained model"
    should hear that it is not there rather than wait for it."""

    def get_or_train(self, name: str, config, model: torch.nn.Module, train_fn,
                     ledger: RunLedger | None = None) -> dict:
        folder = self.path(name, config)
        metrics = self.load(name, config, model)
        if metrics is None:
            raise CacheMiss(f"no run {folder.name} in the run cache {self.root} (not trained yet for this config, "
                            f"code version and thread count, or another cache folder: $BAB_CACHE_DIR)")
        return _noted(ledger, folder, {**metrics, "cached": True})


def _noted(ledger: RunLedger | None, folder: Path, metrics: dict) -> dict:
    if ledger is not None:
        ledger.note_model(folder.name, metrics, cached=metrics["cached"])
    return metrics


def train_cached(cache: RunCache, name: str, lineage: dict, build, fit, *, seed: int, method: str,
                 version: int, ledger: RunLedger | None = None) -> tuple[torch.nn.Module, dict, dict]:
    """Train one model through the run cache, or load it: ``(model in eval mode, metrics, lineage)``.

    ``lineage``: everything that determines the run (data, model, training, the run it started from).
    ``{"code": {"method": method, "version": version, "threads": n}}`` is added to it, so bumping a method's
    ``TRAINING_VERSION`` retrains instead of serving a checkpoint of the old training code, and a run trained on
    a different number of torch threads (which sums in a different order: ``bab.core.threads``), with other matrix
    kernels (``bab.core.blas``) or on a GPU is its own run; the returned lineage has it too, for the runs that start
    from this one, as the plain data the key hashes (each config as its difference from its first defaults). The
    model comes back on the CPU.
    ``build() -> model`` is called after seeding with ``seed``, so the initialisation is reproducible
    (an already built model is used as it is). ``fit(model, checkpoint) -> metrics`` trains in place, passing
    ``checkpoint`` (a ``Checkpointer``, or None) to its training loop so an interrupted run resumes; it runs
    only on a cache miss. ``ledger`` notes the model, its provenance and seed.
    """
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(f"version must be the method's TRAINING_VERSION integer, got {version!r}")
    lineage = {**lineage, "code": {"method": method, "version": version, "threads": torch.get_num_threads(),
                                   **device_key(), **blas_key()}}
    seed_everything(seed)
    model = build if isinstance(build, torch.nn.Module) else build()
    metrics = cache.get_or_train(name, lineage, model, fit, ledger)
    release_freed_memory()  # what the training freed, before the next model is built
    model.cpu()  # where a cached model loads, and where every evaluation and benchmark runs
    run = cache.path(name, lineage).name
    if ledger is not None:
        ledger.note_seed(run, seed)
    setattr(model, RUN_TAG, {"run": run, "seed": seed})
    return model.eval(), metrics, plain(lineage)
