"""Notebook 05's study: a small ViT on Fashion-MNIST, Sparsifiner, and its baselines on one cost axis.

Every trained model goes through the run cache, keyed by its whole lineage (data, model, training,
and the run it started from), so the notebook re-runs in seconds once its models exist:

    dense teacher -> Sparsifiner phase 1 (predictor) -> phase 2 (joint)
                  -> Linformer at the same budget (warm start, same recipe as phase 2)
                  -> budgeted head gates (warm start, Eq. 5) -> hard top-k heads (straight-through)
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd

import bab.sparsifiner
from bab.core.runs import RunCache, train_cached
from bab.data.images import image_splits, load_fashion_mnist
from bab.sparsifiner.evaluate import evaluate_vit
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.train import train_vit
from bab.sparsifiner.vit import ViTClassifier, ViTClassifierConfig


@cache
def _cached_splits(num_train: int, num_val: int, num_test: int, seed: int, path: str | None):
    return image_splits(load_fashion_mnist(path), num_train, num_val, num_test, seed)


class ViTStudy:
    experiment = "vit_sparsifiner"

    def __init__(self, profile, cache: RunCache | None = None, progress: bool = True, data_path=None):
        self.profile = profile
        self.cache = cache if cache is not None else RunCache()
        self.progress = progress
        self.data_path = data_path

    # -- data and shapes --------------------------------------------------------------------

    def splits(self) -> dict:
        p = self.profile
        return _cached_splits(p.num_train, p.num_val, p.num_test, p.seed,
                              None if self.data_path is None else str(self.data_path))

    def data_lineage(self) -> dict:
        p = self.profile
        return {"dataset": "fashion_mnist", "num_train": p.num_train, "num_val": p.num_val, "num_test": p.num_test,
                "seed": p.seed}

    def model_config(self, **extra) -> ViTClassifierConfig:
        return ViTClassifierConfig(**self.profile.model, **extra)

    def sparsifiner_config(self) -> ViTClassifierConfig:
        p = self.profile
        return self.model_config(predictor=True, n_down=p.n_down, tau=p.tau, up_prune=p.up_prune)

    def linformer_len(self) -> int:
        """Linformer's projection length = the Sparsifiner budget k at the comparison keep rate (Table 4)."""
        return num_connections(self.profile.linformer_keep_rate, self.model_config().num_tokens)

    # -- training through the cache ---------------------------------------------------------

    def _train_cached(self, name, model_config, train_config, parent=None, init=None, teacher=None):
        """Build, warm-start and train one ViT, or load it from the run cache."""
        lineage = {"experiment": self.experiment, "data": self.data_lineage(), "model": model_config.to_dict(),
                   "train": train_config.to_dict(), "parent": parent}

        def fit(model):
            if init is not None:
                missing, unexpected = model.load_state_dict(init.state_dict(), strict=False)
                if unexpected:
                    raise ValueError(f"warm start from a model with weights this one lacks: {unexpected}")
            result = train_vit(model, self.splits()["train"], train_config, teacher=teacher, progress=self.progress)
            return {"history": result.history, "train_seconds": result.seconds}

        return train_cached(self.cache, f"{self.experiment}-{name}", lineage, lambda: ViTClassifier(model_config), fit,
                            seed=train_config.seed, method="sparsifiner", version=bab.sparsifiner.TRAINING_VERSION)

    def dense(self):
        return self._train_cached("dense", self.model_config(), replace(self.profile.dense, seed=self.profile.seed))

    def predictor(self):
        """Phase 1: predictors trained on the frozen dense backbone (attention distillation)."""
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.phase1, seed=self.profile.seed)
        return self._train_cached("phase1", self.sparsifiner_config(), config, parent=dense_lineage, init=dense)

    def sparsifiner(self):
        """Phase 2: backbone and (frozen) predictors under sparse attention, distilled from the dense teacher."""
        dense, _, _ = self.dense()
        phase1, _, phase1_lineage = self.predictor()
        config = replace(self.profile.phase2, seed=self.profile.seed)
        return self._train_cached("phase2", self.sparsifiner_config(), config, parent=phase1_lineage, init=phase1,
                                  teacher=dense)

    def linformer(self):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.phase2, objective="linformer", seed=self.profile.seed)
        return self._train_cached("linformer", self.model_config(linformer_len=self.linformer_len()), config,
                                  parent=dense_lineage, init=dense, teacher=dense)

    def budgeted_heads(self):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.heads, seed=self.profile.seed)
        return self._train_cached("heads", self.model_config(gates="budget"), config, parent=dense_lineage,
                                  init=dense)

    def budgeted_heads_hard(self):
        """The soft budgeted-head checkpoint adapted to hard top-k heads (straight-through, KL to the teacher)."""
        dense, _, _ = self.dense()
        soft, _, soft_lineage = self.budgeted_heads()
        config = replace(self.profile.heads, objective="heads_hard", seed=self.profile.seed)
        return self._train_cached("heads-hard", self.model_config(gates="budget"), config, parent=soft_lineage,
                                  init=soft, teacher=dense)

    # -- evaluation -------------------------------------------------------------------------

    def keep_rate_sweep(self, model, keep_rates, split: str = "test", attention: str = "masked") -> pd.DataFrame:
        """Accuracy and analytic MHSA cost at each keep rate (one checkpoint). ``masked`` is numerically
        equal to ``sparse`` (tested) and faster at these short sequences; the notebook checks it on a batch."""
        rows = []
        for rate in keep_rates:
            stats = evaluate_vit(model, self.splits()[split], attention=attention, keep_rate=rate)
            rows.append({"keep_rate": rate, "connections": num_connections(rate, model.config.num_tokens), **stats})
        return pd.DataFrame(rows)

    def result_row(self, method: str, budget: float, stats: dict, speedup: float | None = None, note: str = ""):
        row = {"experiment": self.experiment, "method": method, "budget": round(float(budget), 4),
               "cost": None if stats.get("cost") is None else float(stats["cost"]),
               "accuracy": None if stats.get("accuracy") is None else float(stats["accuracy"]),
               "speedup": None if speedup is None else float(speedup)}
        if note:
            row["note"] = note
        return row
