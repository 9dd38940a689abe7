"""The synthetic marked-token study (budgeted-attention paper, sections 6.1-6.2), step by step.

Each method is one method of ``SyntheticExperiment``; the notebook calls them in order. Every
trained model goes through the run cache, keyed by its whole lineage (data, model, training,
and for warm starts the dense run it started from), so re-running the notebook reuses them.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd
import torch

from bab.data.synthetic import SyntheticConfig, build_synthetic
from bab.evaluate import budget_sweep, evaluate, is_monotone
from bab.gates import num_heads_to_keep
from bab.models.encoder import EncoderClassifier, EncoderConfig
from bab.profiles import SyntheticProfile
from bab.prune import head_importance, posthoc_mask
from bab.runs import RunCache
from bab.train import TrainConfig, seed_everything, train, warm_start

EXPERIMENT = "synthetic"


class SyntheticExperiment:
    def __init__(self, profile: SyntheticProfile, cache: RunCache | None = None, progress: bool = True):
        self.profile = profile
        self.cache = cache if cache is not None else RunCache()
        self.progress = progress
        self.reference_data_seed = profile.data_seeds[0]
        self.reference_opt_seed = profile.opt_seeds[0]

    # -- data and models -------------------------------------------------------------------

    def data_config(self, data_seed: int | None = None) -> SyntheticConfig:
        seed = self.reference_data_seed if data_seed is None else data_seed
        return replace(self.profile.data, seed=seed)

    def data(self, data_seed: int | None = None):
        return _cached_data(self.data_config(data_seed))

    def model_config(self, gates: str | None = None) -> EncoderConfig:
        d = self.profile.data
        return EncoderConfig(vocab_size=d.vocab_size, num_classes=2, max_len=d.seq_len, gates=gates,
                             **self.profile.model)

    def _lineage(self, model_config: EncoderConfig, train_config: TrainConfig, data_seed: int, parent: dict | None):
        return {
            "experiment": EXPERIMENT,
            "data": self.data_config(data_seed).to_dict(),
            "model": model_config.to_dict(),
            "train": train_config.to_dict(),
            "parent": parent,
        }

    def _train_cached(self, name, model_config, train_config, data_seed=None, parent=None, init=None, teacher=None):
        """Build, (warm-)initialise and train one model, or load it from the run cache."""
        data_seed = self.reference_data_seed if data_seed is None else data_seed
        lineage = self._lineage(model_config, train_config, data_seed, parent)
        seed_everything(train_config.seed)
        model = EncoderClassifier(model_config)
        train_set, val_set = self.data(data_seed)

        def fit(model):
            if init is not None:
                warm_start(model, init)
            result = train(model, train_set, train_config, teacher=teacher, progress=self.progress)
            return {"history": result.history, "train_seconds": result.seconds}

        metrics = self.cache.get_or_train(name, lineage, model, fit)
        model.eval()
        return model, metrics, lineage

    # -- the methods of Table 1 ------------------------------------------------------------

    def dense(self, data_seed: int | None = None, opt_seed: int | None = None):
        seed = self.reference_opt_seed if opt_seed is None else opt_seed
        config = replace(self.profile.dense, seed=seed)
        return self._train_cached("synthetic-dense", self.model_config(), config, data_seed)

    def dense_grid(self) -> pd.DataFrame:
        """Dense full attention over the data-seed x optimisation-seed grid."""
        rows = []
        for data_seed in self.profile.data_seeds:
            for opt_seed in self.profile.opt_seeds:
                model, metrics, _ = self.dense(data_seed, opt_seed)
                val = self.data(data_seed)[1]
                rows.append({"data_seed": data_seed, "opt_seed": opt_seed,
                             "accuracy": evaluate(model, val)["accuracy"],
                             "train_seconds": metrics["train_seconds"], "cached": metrics["cached"]})
        return pd.DataFrame(rows)

    def budgeted_from_scratch(self, opt_seed: int):
        config = replace(self.profile.scratch, seed=opt_seed)
        return self._train_cached("synthetic-scratch", self.model_config("budget"), config)

    def warm_start_budgeted(self):
        dense, _, dense_lineage = self.dense()
        return self._train_cached("synthetic-warm", self.model_config("budget"), self.profile.warm,
                                  parent=dense_lineage, init=dense)

    def warm_start_static(self, budget: float):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.static, budget=budget)
        return self._train_cached("synthetic-static", self.model_config("static"), config,
                                  parent=dense_lineage, init=dense)

    def hard_adapted(self):
        """Warm-start budgeted + one epoch of straight-through hard top-k with distillation (Eq. 6)."""
        soft, _, soft_lineage = self.warm_start_budgeted()
        return self._train_cached("synthetic-hard", self.model_config("budget"), self.profile.hard_adapt,
                                  parent=soft_lineage, init=soft, teacher=soft)

    def posthoc(self) -> tuple[pd.DataFrame, torch.Tensor]:
        """Dense post-hoc pruning: rank heads by validation-loss increase, keep top-k per budget."""
        dense, _, _ = self.dense()
        val = self.data()[1]
        importance = head_importance(dense, val)
        rows = []
        for b in self.profile.posthoc_budgets:
            mask = posthoc_mask(importance, b)
            stats = evaluate(dense, val, mode="hard", head_mask=mask)
            rows.append({"budget": b, "heads_kept": int(mask.sum()), "cost": stats["cost"],
                         "accuracy": stats["accuracy"]})
        return pd.DataFrame(rows), importance

    # -- sweeps and accounting -------------------------------------------------------------

    def sweep(self, model, mode: str = "soft") -> pd.DataFrame:
        return budget_sweep(model, self.data()[1], self.profile.sweep_budgets, mode=mode)


def hard_topk_is_exact(sweep: pd.DataFrame, total_heads: int) -> bool:
    """Hard sweep rows keep exactly ceil(b * L * H) heads at every budget."""
    return all(abs(row.cost * total_heads - num_heads_to_keep(row.budget, total_heads)) < 1e-6
               for row in sweep.itertuples())


def monotone_verdict(sweep: pd.DataFrame) -> str:
    return f"cost monotone over {len(sweep)} budgets: {is_monotone(sweep.cost)}"


def deployment_accounting(num_budgets: int) -> pd.DataFrame:
    """Table 2 for K target budgets: fine-tune jobs and deployed artifacts of each method."""
    K = num_budgets
    rows = [
        ("dense full", 1, 1, "single cost"),
        ("dense post-hoc pruning", 1, K, "discrete (K masks)"),
        ("dense post-hoc + recovery", 1 + K, K, "discrete (K recovered models)"),
        ("warm-start static", 1 + K, K, "discrete (K specialists)"),
        ("budgeted soft (warm start)", 2, 1, "continuous, estimated cost"),
        ("budgeted hard-adapt", 3, 1, "continuous + structural"),
    ]
    return pd.DataFrame(rows, columns=["method", "fine-tune jobs", f"artifacts for {K} budgets", "control"])


@cache
def _cached_data(config: SyntheticConfig):
    return build_synthetic(config)


def result_row(method: str, budget: float, stats) -> dict:
    """One row of the results JSON (see ``bab.report.save_results``) from evaluation stats."""
    return {"experiment": EXPERIMENT, "method": method, "budget": round(float(budget), 4),
            "cost": float(stats["cost"]), "accuracy": float(stats["accuracy"]), "speedup": None}
