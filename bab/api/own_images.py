"""The ViT pipeline's steps on a caller's own images: what ``bab.api.SparsifinerClassifier.fit`` runs."""

from __future__ import annotations

import copy
from dataclasses import replace

from bab.core.digest import state_digest
from bab.core.runs import RunCache
from bab.experiments.pipelines.vit import ViTStudy
from bab.experiments.pipelines.vit_profile import ViTProfile
from bab.experiments.study import tensors_digest
from bab.sparsifiner.attach import attach
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit


class OwnImagesStudy(ViTStudy):
    """The dense -> phase 1 -> phase 2 steps on a caller's own training images (``SparsifinerClassifier.fit``):
    ``config`` is the Sparsifiner model (the dense one is it without predictors), ``train`` a TensorDataset of
    (pixels, label ids). No validation split: the last epoch is kept. Runs are keyed by the digest of ``train``.

    ``base_model``: a transformers ViT / DeiT image classifier of the caller's, whose copies (Sparsifiner attached)
    every step starts from instead of a random ViT of ``config``'s shape; its weights' digest keys the runs."""

    experiment = "own_images"

    def __init__(self, profile: ViTProfile, config: ViTClassifierConfig, train, cache: RunCache | None = None,
                 progress: bool = True, base_model=None):
        super().__init__(profile, cache, progress)
        self.config, self.train_set, self.base_model = config, train, base_model

    def splits(self) -> dict:
        return {"train": self.train_set}

    def data_lineage(self) -> dict:
        lineage = {"train": tensors_digest(self.train_set)}
        if self.base_model is not None:
            lineage["base_model"] = {"class": type(self.base_model).__name__, "weights": state_digest(self.base_model)}
        return lineage

    def build(self, model_config: ViTClassifierConfig):
        if self.base_model is None:
            return build_vit(model_config)
        return attach(copy.deepcopy(self.base_model), model_config.connectivity, core="dense",
                      linformer_len=model_config.linformer_len)

    def model_config(self, **extra) -> ViTClassifierConfig:
        return replace(self.config, connectivity=None, **extra)

    def sparsifiner_config(self) -> ViTClassifierConfig:
        return self.config
