"""The synthetic marked-token study (budgeted-attention paper, sections 6.1-6.2), step by step.

``SyntheticExperiment`` supplies the data and model shape; the training steps are the shared
ones of ``bab.experiments.study.BudgetedStudy``, each cached by its whole lineage.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd

from bab.data.synthetic import SyntheticConfig, build_synthetic
from bab.evaluate import evaluate, is_monotone
from bab.experiments.study import BudgetedStudy
from bab.gates import num_heads_to_keep
from bab.models.encoder import EncoderConfig

EXPERIMENT = "synthetic"


class SyntheticExperiment(BudgetedStudy):
    """Results are validation accuracy, as in the paper's synthetic tables; no checkpoint selection."""

    experiment = EXPERIMENT
    eval_split = "val"

    @property
    def default_seed(self) -> int:
        return self.profile.opt_seeds[0]

    def data_config(self, data_seed: int | None = None) -> SyntheticConfig:
        seed = self.profile.data_seeds[0] if data_seed is None else data_seed
        return replace(self.profile.data, seed=seed)

    def data_lineage(self, data_seed=None) -> dict:
        return self.data_config(data_seed).to_dict()

    def splits(self, data_seed=None) -> dict:
        train, val = _cached_data(self.data_config(data_seed))
        return {"train": train, "val": val, "test": val}

    def data(self, data_seed: int | None = None):
        """(train, validation) datasets."""
        splits = self.splits(data_seed)
        return splits["train"], splits["val"]

    def model_config(self, gates: str | None = None) -> EncoderConfig:
        d = self.profile.data
        return EncoderConfig(vocab_size=d.vocab_size, num_classes=2, max_len=d.seq_len, gates=gates,
                             **self.profile.model)

    def dense_grid(self) -> pd.DataFrame:
        """Dense full attention over the data-seed x optimisation-seed grid."""
        rows = []
        for data_seed in self.profile.data_seeds:
            for opt_seed in self.profile.opt_seeds:
                model, metrics, _ = self.dense(data_seed, opt_seed)
                rows.append({"data_seed": data_seed, "opt_seed": opt_seed,
                             "accuracy": evaluate(model, self.data(data_seed)[1])["accuracy"],
                             "train_seconds": metrics["train_seconds"], "cached": metrics["cached"]})
        return pd.DataFrame(rows)

    def posthoc(self, budgets=None):
        return super().posthoc(self.profile.posthoc_budgets if budgets is None else budgets)

    def sweep(self, model, mode: str = "soft", budgets=None) -> pd.DataFrame:
        return super().sweep(model, self.profile.sweep_budgets if budgets is None else budgets, mode=mode)


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

