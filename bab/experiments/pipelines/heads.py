"""Budgeted heads on any data: the steps of the budgeted-attention paper's comparison (notebooks 01-04).

A ``BudgetedStudy`` owns a train / validation / evaluation split and an encoder shape. Each step trains one
model of the comparison (dense, budgeted from scratch, warm-start budgeted, static specialists, hard
adaptation) through the run cache (``bab.experiments.study.Study``), or evaluates one (post-hoc pruning,
sweeps). Subclasses say where the data come from, which model they build and how checkpoints are selected:
``SyntheticExperiment`` (notebook 01), ``TextStudy`` (02), ``BertStudy`` (03, 04), and the study over a
user's own texts that ``bab.api.BudgetedClassifier.fit`` runs (``bab.api.own_data``).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

import bab.heads
from bab.core.outcomes import keep_units
from bab.experiments.study import Study, trained
from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.evaluate import budget_sweep, evaluate, is_monotone
from bab.heads.gates import num_heads_to_keep
from bab.heads.posthoc import head_importance, posthoc_mask
from bab.heads.train import TrainConfig, train


class BudgetedStudy(Study):
    method = "heads"
    method_code = bab.heads
    eval_split: str = "val"  # the split results are reported on ("val" or "test")

    # -- what a subclass provides ----------------------------------------------------------

    def splits(self, data_seed=None) -> dict:
        """{"train": ..., "val": ..., "test": ...} TensorDatasets of (input_ids, labels)."""
        raise NotImplementedError

    def data_lineage(self, data_seed=None) -> dict:
        """Everything that determines the data, for the run-cache key."""
        raise NotImplementedError

    def model_config(self, gates: str | None = None) -> EncoderConfig:
        raise NotImplementedError

    def build_model(self, model_config) -> torch.nn.Module:
        """A fresh (untrained or pretrained) model of ``model_config``."""
        return EncoderClassifier(model_config)

    def selection(self, train_config: TrainConfig):
        """``select(model) -> float`` on validation data, or None to keep the last epoch."""
        return None

    @property
    def default_seed(self) -> int:
        return self.profile.seed

    # -- training through the cache --------------------------------------------------------

    def fitter(self, train_config: TrainConfig, data_seed=None, teacher=None):
        """``fit(model, checkpoint)`` for ``Study.train_cached``: ``train_config`` on the training split, with this
        study's checkpoint selection and resumable checkpoints."""
        def fit(model, checkpoint):
            result = train(model, self.splits(data_seed)["train"], train_config, teacher=teacher,
                           progress=self.progress, select=self.selection(train_config), checkpoint=checkpoint)
            return trained(result)
        return fit

    def _train(self, name, model_config, train_config, data_seed=None, parent=None, init=None, teacher=None):
        """Build, (warm-)initialise and train one model of ``model_config``, or load it from the run cache."""
        lineage = {"data": self.data_lineage(data_seed), "model": model_config,
                   "train": train_config, "parent": parent}
        return self.train_cached(name, lambda: self.build_model(model_config),
                                 self.fitter(train_config, data_seed, teacher), lineage, seed=train_config.seed,
                                 init=init)

    # -- the methods of the paper's comparison ---------------------------------------------

    def dense(self, data_seed=None, opt_seed=None):
        seed = self.default_seed if opt_seed is None else opt_seed
        return self._train("dense", self.model_config(), replace(self.profile.dense, seed=seed), data_seed)

    def budgeted_from_scratch(self, opt_seed=None, config: TrainConfig | None = None):
        """Gates and weights trained together from random weights (``config``: the profile's ``scratch``)."""
        seed = self.default_seed if opt_seed is None else opt_seed
        return self._train("scratch", self.model_config("budget"), replace(config or self.profile.scratch, seed=seed))

    def warm_start_budgeted(self, config: TrainConfig | None = None):
        """Dense weights into a budget-gated model, then Eq. 5 (``config``: the profile's ``warm`` unless given)."""
        dense, _, dense_lineage = self.dense()
        config = replace(config or self.profile.warm, seed=self.default_seed)
        return self._train("warm", self.model_config("budget"), config, parent=dense_lineage, init=dense)

    def warm_start_static(self, budget: float):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.static, budget=budget, seed=self.default_seed)
        return self._train("static", self.model_config("static"), config, parent=dense_lineage, init=dense)

    def hard_adapted(self, config: TrainConfig | None = None, soft=None):
        """Straight-through hard top-k with distillation (Eq. 6) from a soft checkpoint: ``soft`` (a
        (model, metrics, lineage) triple; default the warm-start budgeted one) under ``config`` (default the
        profile's ``hard_adapt``). The unadapted checkpoint is kept when adaptation does not raise validation
        accuracy (``metrics["selected_epoch"] == 0``, for studies that select on validation)."""
        soft_model, _, soft_lineage = soft or self.warm_start_budgeted()
        config = replace(config or self.profile.hard_adapt, seed=self.default_seed)
        teacher = self.dense()[0] if config.adaptation.kd_teacher == "dense" else soft_model
        gates = "static" if soft_model.config.gates == "static" else "budget"
        model, metrics, lineage = self._train("static-hard" if gates == "static" else "hard", self.model_config(gates),
                                              config, parent=soft_lineage, init=soft_model, teacher=teacher)
        model.min_per_layer = config.adaptation.min_per_layer  # not a weight: set again on a model from the cache
        return model, metrics, lineage

    def static_hard_adapted(self, budget: float):
        """One static specialist adapted to hard skipping at its own budget (the same recipe, b fixed)."""
        config = replace(self.profile.hard_adapt, budget=budget, budget_choices=None)
        return self.hard_adapted(config, soft=self.warm_start_static(budget))

    def posthoc(self, budgets) -> tuple[pd.DataFrame, torch.Tensor]:
        """Dense post-hoc pruning: rank heads by validation-loss increase, keep top-k per budget. The table keeps
        each evaluation's per-example outcomes (``bab.core.outcomes.row_units``)."""
        dense, _, _ = self.dense()
        data = self.splits()
        importance = head_importance(dense, data["val"])
        rows, evaluations = [], []
        for b in budgets:
            mask = posthoc_mask(importance, b)
            stats = evaluate(dense, data[self.eval_split], mode="hard", head_mask=mask)
            evaluations.append(stats)
            rows.append({"budget": b, "heads_kept": int(mask.sum()), "cost": stats["cost"],
                         "accuracy": stats["accuracy"]})
        return keep_units(pd.DataFrame(rows), evaluations), importance

    def sweep(self, model, budgets, mode: str = "soft") -> pd.DataFrame:
        return budget_sweep(model, self.splits()[self.eval_split], budgets, mode=mode)


def hard_topk_is_exact(sweep: pd.DataFrame, total_heads: int) -> bool:
    """Hard sweep rows keep exactly ceil(b * L * H) heads at every budget.

    The cost is a float32 mean of the 0/1 mask, so it carries rounding error of order 1e-7 * L * H;
    one head is 1 / (L * H), far above that.
    """
    return all(abs(row.cost * total_heads - num_heads_to_keep(row.budget, total_heads)) < 1e-3
               for row in sweep.itertuples())


def monotone_verdict(sweep: pd.DataFrame) -> str:
    return f"cost monotone over {len(sweep)} budgets: {is_monotone(sweep.cost)}"


def soft_and_hard_sweeps(soft: pd.DataFrame, hard: pd.DataFrame) -> pd.DataFrame:
    """One row per budget: the budgeted checkpoint's soft cost and accuracy beside the adapted one's hard cost and
    accuracy (two ``HeadsStudy.sweep`` tables over the same budgets)."""
    if list(soft.budget) != list(hard.budget):
        raise ValueError("the soft and hard sweeps must run over the same budgets")
    return pd.DataFrame({"soft cost": soft.cost.values, "soft acc": soft.accuracy.values,
                         "hard cost": hard.cost.values, "hard acc": hard.accuracy.values},
                        index=pd.Index(soft.budget, name="budget"))


def sweep_checks(soft: pd.DataFrame, hard: pd.DataFrame, total_heads: int) -> str:
    """What the two sweeps must show: each cost monotone in the budget, and hard top-k keeping ceil(b L H) heads."""
    return "\n".join([f"{monotone_verdict(soft)} (soft)", f"{monotone_verdict(hard)} (hard)",
                      f"hard top-k keeps exactly ceil(b*L*H) heads at every budget: "
                      f"{hard_topk_is_exact(hard, total_heads)}"])


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

