"""The synthetic marked-token study (budgeted-attention paper, sections 6.1-6.2), step by step.

``SyntheticExperiment`` supplies the data and model shape; the training steps are the shared
ones of ``bab.experiments.study.BudgetedStudy``, each cached by its whole lineage.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd

from bab.data.synthetic import SyntheticConfig, build_synthetic
from bab.experiments.study import BudgetedStudy
from bab.heads.encoder import EncoderConfig
from bab.heads.evaluate import evaluate

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


@cache
def _cached_data(config: SyntheticConfig):
    return build_synthetic(config)

