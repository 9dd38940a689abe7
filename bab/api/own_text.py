"""Dynamic context pruning on a user's own decoder and text: the study ``ContextPruner.fit`` runs.

One step, the fine-tune with the interaction modules attached (``bab.context.train.train_lm``), through the run
cache as the other methods' own-data studies train: a run is keyed by the starting weights' digest, the token
stream's digest and the training config, so an interrupted fit resumes where it stopped and a repeated one is
served from the cache.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

import bab.context
from bab.context.train import LMTrainConfig, train_lm
from bab.core.digest import state_digest
from bab.core.runs import RunCache
from bab.core.step_clock import fit_plan
from bab.experiments.study import Study, tensors_digest


class OwnTextStudy(Study):
    """``model``: a causal LM with context pruning attached (fine-tuned in place); ``ids``: the token stream [N]."""

    experiment = "own_text"
    method = "context"
    method_code = bab.context

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, config: LMTrainConfig,
                 cache: RunCache | None = None, progress: bool = True):
        super().__init__(config, cache, progress)
        self.model, self.ids, self.config = model, ids, config

    def data_lineage(self) -> dict:
        return {"text": tensors_digest(TensorDataset(self.ids))}

    def fine_tune(self) -> tuple[torch.nn.Module, dict]:
        """The fine-tuned model (``self.model``, trained or loaded in place) and the run's metrics (``history`` the
        training loop's rows)."""
        lineage = {"weights": state_digest(self.model), "class": type(self.model).__name__, "train": self.config}

        def fit(model, checkpoint):
            with fit_plan("fit", [(self.config.objective, self.config.steps)], self.progress):
                result = train_lm(model, self.ids, self.config, progress=self.progress, checkpoint=checkpoint)
            return {"history": result.history}

        model, metrics, _ = self.train_cached("fit", self.model, fit, lineage, seed=self.config.seed)
        return model, metrics
