"""The one Study base: what every notebook's study shares, whatever its method and data.

A study owns one profile (sizes, epochs, hyperparameters), a run cache, a ledger of what it used and measured
(``bab.core.ledger``, handed to ``save_results``) and a progress flag. It trains each
model of its paper's comparison through the run cache (``train_cached``), keyed by the model's whole lineage:
the experiment, the data, the model, the training config, the run it started from and the method's code
version, so a notebook re-runs in seconds once its models exist and an interrupted run resumes. It writes
its report rows in one shape (``result_row``). The subclasses, one per method, hold only their experiments
(``bab.experiments.pipelines``).
"""

from __future__ import annotations

import hashlib
import os
import statistics

import numpy as np
import torch

from bab.core import outcomes
from bab.core.blas import blas_key
from bab.core.digest import state_digest
from bab.core.errors import BadInput
from bab.core.ledger import RunLedger
from bab.core.provenance import git_commit
from bab.core.runs import RUN_TAG, RunCache, run_of, train_cached
from bab.core.timing import repeat_times
from bab.core.training import TrainResult
from bab.core.warm_start import warm_start
from bab.experiments.methods import Method, MethodSet, registry


class Study:
    experiment: str = ""  # the name result rows and run-cache folders carry
    method: str = ""  # the method that trains its models, as run keys name it: "heads", "context" or "sparsifiner"
    # The method's package, set by the method's pipeline (the base imports no method): its TRAINING_VERSION keys the
    # runs and its EVALUATION_VERSION the kept measurements, read at every call so a bump retrains.
    method_code = None

    def __init__(self, profile, cache: RunCache | str | os.PathLike | bool | None = None, progress: bool = True,
                 ledger: RunLedger | None = None):
        """``cache``: a RunCache, a folder for one, None or True for the default one (``$BAB_CACHE_DIR``), or False
        for none (every model trained, nothing stored). ``ledger``: another study's, for one record of the models,
        measurements and outcomes of several studies (one notebook's); a new one by default."""
        self.profile = profile
        self.cache = as_run_cache(cache)
        self.progress = progress
        self.ledger = RunLedger() if ledger is None else ledger

    def data_lineage(self) -> dict:
        """Everything that determines the data, for the run-cache key."""
        raise NotImplementedError

    # -- training through the cache ----------------------------------------------------------------------

    def train_cached(self, name: str, build, fit, lineage: dict, *, seed: int, init=None,
                     new_modules: tuple[str, ...] = ("gates",)):
        """Build one model (after seeding with ``seed``), warm-start it from ``init`` and train it, or load it
        from the run cache: ``(model in eval mode, metrics, lineage)``.

        ``lineage``: what determines the run besides the experiment and the data (the model, the training
        config, the run it started from as ``parent``, ...); ``experiment`` and ``data`` (``data_lineage()``
        unless given) are added here, the method's code version by ``bab.core.runs.train_cached``.
        ``fit(model, checkpoint) -> metrics`` trains in place (``trained(result)``: the usual metrics) and passes
        ``checkpoint`` to its training loop, so an interrupted run resumes. ``init``: the trained model this
        one starts from; its weights are checked and copied in (``bab.core.warm_start.warm_start``, with
        ``new_modules`` the modules only this model has) before ``fit``, on a cache miss only.
        """
        lineage = {"experiment": self.experiment, **lineage}
        if "data" not in lineage:
            lineage["data"] = self.data_lineage()

        def warm_fit(model, checkpoint):
            refuse_uncommitted_training(getattr(self.profile, "name", ""))  # a user's own study may have no name
            if init is not None:
                warm_start(model, init, new_modules)
            return fit(model, checkpoint)

        return train_cached(self.cache, f"{self.experiment}-{name}", lineage, build, warm_fit, seed=seed,
                            method=self.method, version=self.method_code.TRAINING_VERSION, ledger=self.ledger)

    # -- slow measurements through the cache -------------------------------------------------------------

    def downloaded_identity(self) -> str | None:
        """What names the study's downloaded (untrained by us) model in a measurement's key, or None when the
        study has none: a subclass with a pretrained model returns its source."""
        return None

    def measurement_data(self) -> dict:
        """Everything that determines the data a measurement reads, for its key: ``data_lineage()``, and what a
        subclass evaluates on besides."""
        return self.data_lineage()

    def measured(self, what: str, model, settings: dict, measure) -> dict:
        """``measure()`` on ``model``, through the run cache (``RunCache.measured``) when a run names the model.

        The key: this experiment; the measured model's run (the cache folder's name, its whole lineage) or, for
        the downloaded model, ``downloaded_identity()``, with a digest of its weights (a model changed after it
        was loaded is another model); ``measurement_data()``; ``what`` and its ``settings``; the method's
        ``EVALUATION_VERSION``, the thread count and the matrix kernels (``bab.core.blas``; sums run in another order
        on another count or kernel). A model no run names (built in the session) is measured every time."""
        tag = getattr(model, RUN_TAG, None)
        identity = None if not isinstance(tag, dict) else tag["run"] or self.downloaded_identity()
        if identity is None:
            return measure()
        version = getattr(self.method_code, "EVALUATION_VERSION", None)
        if version is None:
            return measure()  # the method's measurements are not versioned: never serve a stored one
        config = {"experiment": self.experiment, "model": {"run": identity, "weights": state_digest(model)},
                  "data": self.measurement_data(), "what": what,
                  "settings": settings, "code": {"method": self.method, "version": version,
                                                 "threads": torch.get_num_threads(), **blas_key()}}
        return self.cache.measured(f"{self.experiment}-{what}", config, measure, self.ledger)

    # -- rows for the report -----------------------------------------------------------------------------

    @property
    def methods(self) -> MethodSet:
        """The methods this study's experiment declares (``bab.experiments.methods``): ``study.methods.dense``."""
        return registry()[self.experiment]

    def row_columns(self, stats: dict) -> dict:
        """The contract's measured columns of ``stats`` (an evaluation's dict): cost and accuracy."""
        return {"cost": stats.get("cost"), "accuracy": stats.get("accuracy")}

    def result_row(self, method: Method, budget: float | None, stats: dict, speedup: float | None = None,
                   settings: dict | None = None, *, models, **extra) -> dict:
        """One row of the results contract (``bab.report.results.contract``): the declared ``method`` of this study's
        experiment (``bab.experiments.methods``) at ``budget`` (None for a method without one), the measured
        columns of ``stats`` (``row_columns``), the speed-up, the method's ``settings`` and ``extra`` optional
        columns (``perplexity``, ``memory_ratio``, ``analytic_limit``, ``value``, ``accuracy_std``, ``note``; left
        out when None or empty).

        ``stats`` may also hold the measurement's units (``bab.core.outcomes.KINDS``), recorded in the study's ledger
        for the claims' intervals: ``outcomes`` (whether each test example was right; the row gets ``accuracy_n``),
        ``window_nll`` and ``window_tokens`` (each held-out window's summed log-likelihood and token count),
        ``dense_ms`` and ``ms`` (each interleaved repeat's times).

        ``models``: the trained model (or models) the row measured, as ``train_cached`` returned them; the row
        names their runs and seeds, and ``save_results`` adds the commit that trained each and whether it came
        from the run cache. ``()`` for a row that measured no trained model.

        ValueError when ``method`` is text or belongs to another experiment, or when the budget or the settings
        do not fit it, so a wrong row fails here, in the cell that builds it."""
        if not isinstance(method, Method):
            raise ValueError(f"result_row takes a declared Method (e.g. {type(self).__name__}'s experiment's "
                             f"METHODS.dense, bab.experiments.methods), got {method!r}")
        if method.experiment != self.experiment:
            raise ValueError(f"method {method.name!r} belongs to {method.experiment!r}, this study is "
                             f"{self.experiment!r}")
        row = {"experiment": self.experiment, "method": method.name, "budget": method.check_budget(budget)}
        row.update({key: _number(value) for key, value in self.row_columns(stats).items()})
        row["speedup"] = _number(speedup)
        if method.settings or settings:
            row["settings"] = method.check_settings(settings)
        row.update({key: value if key == "note" else _number(value) for key, value in extra.items()
                    if value is not None and value != ""})
        row.update(measured_on(models))
        if stats.get("outcomes") is not None:  # per-example outcomes: paired intervals in the claims
            row["accuracy_n"] = self.ledger.record(row, stats["outcomes"])
        for kind in outcomes.KINDS[1:]:  # per-window log-likelihoods, per-repeat times, unit ids
            if stats.get(kind) is not None:
                self.ledger.record(row, stats[kind], kind)
        return row

    def rows_of(self, method: Method, evaluations, *, models, **extra) -> list[dict]:
        """One row of ``method`` per evaluation in ``evaluations`` (``evaluate`` dicts, or a table whose records are,
        with the per-unit measurements it kept, ``bab.core.outcomes.keep_units``), each with its ``budget``;
        ``models``: the model every one measured, or {budget: model}."""
        if hasattr(evaluations, "to_dict"):
            records = [{**r, **outcomes.row_units(evaluations, label)}
                       for label, r in zip(evaluations.index, evaluations.to_dict("records"), strict=True)]
        else:
            records = list(evaluations)
        return [self.result_row(method, r["budget"], r, models=models[r["budget"]] if isinstance(models, dict)
                                else models, **extra) for r in records]

    def timed_row(self, method: Method, budget: float | None, stats: dict, timings, name: str, *, models,
                  baseline: str = "dense", **extra) -> dict:
        """A row of ``stats`` with the speed of ``timings``' entry ``name`` (a latency table of
        ``bab.heads.bench``: its ``speedup`` and ``analytic_limit`` over ``baseline``, and the per-repeat times
        behind them for the claims' interval)."""
        return self.result_row(method, budget, {**stats, **repeat_times(timings, name, baseline)},
                               speedup=timings.loc[name, "speedup"], analytic_limit=timings.loc[name, "analytic_limit"],
                               models=models, **extra)

    def mean_row(self, method: Method, budget: float | None, per_model: list[tuple], **extra) -> dict:
        """One row of ``method`` averaging several trained models (seeds): ``per_model`` holds ``(model, stats)``
        pairs. Cost and accuracy are the means, ``accuracy_std`` the sample standard deviation (n - 1), and the
        row names every model's run and seed. One pair gives that model's row, without a standard deviation."""
        if not per_model:
            raise ValueError("mean_row needs at least one (model, stats) pair")
        if len(per_model) == 1:
            model, stats = per_model[0]
            return self.result_row(method, budget, stats, models=model, **extra)
        row = self.result_row(method, budget, per_model[0][1], models=[model for model, _ in per_model], **extra)
        columns = [self.row_columns(stats) for _, stats in per_model]
        row.update({key: _mean([c[key] for c in columns]) for key in columns[0]})
        if row.get("accuracy") is not None:
            row["accuracy_std"] = statistics.stdev(float(c["accuracy"]) for c in columns)
        per_example = [stats.get("outcomes") for _, stats in per_model]
        ids = [stats.get("unit_ids") for _, stats in per_model]
        if all(o is not None for o in per_example):
            aligned = outcomes.align([np.asarray(o) for o in per_example], ids)
            if aligned is not None:
                row["accuracy_n"] = self.ledger.record(row, np.stack(aligned))  # [seeds, examples]
                if ids[0] is not None:
                    self.ledger.record(row, ids[0], "unit_ids")
        return row


def measured_on(models) -> dict:
    """The row columns naming the models a row measured: ``runs`` (their run-cache folders, first use first) and
    ``seeds`` (sorted), both left out for ``()``."""
    if isinstance(models, torch.nn.Module):
        models = [models]
    runs, seeds = [], set()
    for model in models:
        tag = run_of(model)
        if tag["run"] is None:  # used as downloaded (bab.core.runs.as_downloaded): trained by no run of ours
            continue
        if tag["run"] not in runs:
            runs.append(tag["run"])
        seeds.add(tag["seed"])
    if not runs:
        return {}
    return {"runs": runs, "seeds": sorted(seeds)}


# the committed records' profiles (reports/record/, reports/paper/): their models name their commit
RECORD_PROFILES = ("record", "paper")


def refuse_uncommitted_training(profile_name: str, commit: str | None = None, doing: str = "train") -> None:
    """At a record's profile (``RECORD_PROFILES``, and their variants such as "paper, 197 tokens") every model and
    result must name the commit that made it, so training (or running the report) from a checkout whose code differs
    from its commit ("+dirty": ``bab.core.provenance.git_commit``) raises ``BadInput`` (a ValueError) saying how to fix
    it, before any work. Loading a cached model is never refused."""
    if profile_name.split(",")[0] not in RECORD_PROFILES:
        return
    commit = git_commit() if commit is None else commit
    if commit.endswith("+dirty"):
        raise BadInput(f"profile {profile_name!r} makes the committed record, whose models and results name the "
                         f"commit that made them, but this checkout's code differs from its commit ({commit}): "
                         f"commit or stash the changes (git status), then {doing} again")


def as_run_cache(cache) -> RunCache:
    """A study's ``cache`` argument as a RunCache (see ``Study.__init__``)."""
    if isinstance(cache, RunCache):
        return cache
    if cache is None or cache is True:
        return RunCache()
    if cache is False:
        return RunCache(enabled=False)
    return RunCache(cache)


def trained(result: TrainResult) -> dict:
    """The metrics a study stores with a trained model: its history, training time, selected epoch, and the
    step an interrupted run resumed from (None: trained in one sitting)."""
    return {"history": result.history, "train_seconds": result.seconds, "selected_epoch": result.selected_epoch,
            "resumed_at": result.resumed_at}


def tensors_digest(data) -> str:
    """SHA-256 of a TensorDataset's tensors (shapes, dtypes and values): the data lineage of a caller's own data."""
    digest = hashlib.sha256()
    for tensor in data.tensors:
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def _number(value) -> float | None:
    return None if value is None else float(value)


def _mean(values) -> float | None:
    return None if any(v is None for v in values) else statistics.fmean(float(v) for v in values)
