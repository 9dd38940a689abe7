"""Budgeted heads on a user's own labelled texts and Hugging Face encoder: the study ``BudgetedClassifier.fit`` runs.

The steps of notebook 03 (``BudgetedStudy``: dense fine-tune -> warm-start budgeted gates -> hard adaptation)
on splits the caller has tokenized, through the run cache. A run is keyed by a digest of those splits, the
label names, the encoder's files and the training configs, so an interrupted fit resumes where it stopped
and a repeated one is served from the cache. Checkpoints are selected on validation by the training loop
(``select``): dense by accuracy, gated stages by the mean accuracy at ``select_budgets`` (soft for the
budgeted stage, hard top-k for the adaptation, whose unadapted checkpoint is a candidate too), and only for
stages of more than one epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from torch.utils.data import TensorDataset

from bab.core.runs import RunCache
from bab.experiments.pipelines.heads import BudgetedStudy
from bab.experiments.study import tensors_digest
from bab.heads.evaluate import evaluate
from bab.heads.hf_encoder import GatedHFClassifier, HFEncoderConfig, load_classifier, resolve_encoder_source
from bab.heads.train import TrainConfig

# the encoder folder's files that decide its weights and shape (the tokenizer's are in the data digest)
_ENCODER_FILES = (".json", ".safetensors", ".bin")


@dataclass(frozen=True)
class OwnDataProfile:
    """What ``BudgetedClassifier.fit`` trains (``bab.heads.recipe.Recipe.train_configs``)."""

    dense: TrainConfig
    warm: TrainConfig  # the warm-start budgeted stage
    hard_adapt: TrainConfig | None  # None: no hard adaptation
    seed: int
    select_budgets: tuple[float, ...] = (0.25, 0.5, 0.75)  # the mean over low, middle and high budgets picks
    name: str = "own data"


class OwnDataStudy(BudgetedStudy):
    """``train`` / ``val``: TensorDatasets of (input_ids, label ids); ``val`` None: no checkpoint selection.
    ``labels``: the class names in id order (they become the model's ``id2label``)."""

    experiment = "own_data"
    eval_split = "val"

    def __init__(self, profile: OwnDataProfile, source: str, labels, train: TensorDataset,
                 val: TensorDataset | None = None, cache: RunCache | None = None, progress: bool = True):
        super().__init__(profile, cache, progress)
        self.source, self.labels = str(source), list(labels)
        self._splits = {"train": train, "val": val, "test": val}
        self._config: HFEncoderConfig | None = None
        self._lineage: dict | None = None

    def splits(self, data_seed=None) -> dict:
        return self._splits

    def data_lineage(self, data_seed=None) -> dict:
        if self._lineage is None:  # digests of the data and the encoder's files: computed once
            val = self._splits["val"]
            self._lineage = {"train": tensors_digest(self._splits["train"]),
                             "val": None if val is None else tensors_digest(val), "labels": self.labels,
                             "select_budgets": list(self.profile.select_budgets),
                             "encoder": encoder_fingerprint(self.source)}
        return self._lineage

    def model_config(self, gates: str | None = None) -> HFEncoderConfig:
        if self._config is None:
            hf, _ = load_classifier(self.source, num_labels=len(self.labels))
            self._config = GatedHFClassifier.from_hf(hf, self.source).config
        return replace(self._config, gates=gates)

    def build_model(self, model_config: HFEncoderConfig) -> GatedHFClassifier:
        hf, _ = load_classifier(self.source, num_labels=len(self.labels),
                                attn_implementation=model_config.attn_implementation)
        hf.config.id2label = dict(enumerate(self.labels))
        hf.config.label2id = {name: i for i, name in enumerate(self.labels)}
        return GatedHFClassifier(hf, model_config)

    def selection(self, train_config: TrainConfig):
        val = self._splits["val"]
        if val is None or train_config.epochs == 1:
            return None
        if train_config.objective == "dense":
            return lambda model: evaluate(model, val)["accuracy"]
        budgets = self.profile.select_budgets
        mode = "hard" if train_config.objective == "hard_adapt" else "soft"
        return lambda model: sum(evaluate(model, val, b, mode)["accuracy"] for b in budgets) / len(budgets)

    def fit(self) -> tuple[GatedHFClassifier, dict, GatedHFClassifier]:
        """Dense -> warm-start budgeted -> (the profile's ``hard_adapt``) hard adaptation: the last model, with
        hard mode's per-layer floor of one head, {stage: history}, and the dense fine-tune it started from."""
        dense, dense_metrics, _ = self.dense()
        soft = self.warm_start_budgeted()
        model, history = soft[0], {"dense": dense_metrics["history"], "budgeted": soft[1]["history"]}
        if self.profile.hard_adapt is not None:
            model, hard_metrics, _ = self.hard_adapted(soft=soft)
            history["hard"] = hard_metrics["history"]
        model.min_per_layer = max(1, model.min_per_layer)  # hard mode = what structural pruning materialises
        return model, history, dense


def encoder_fingerprint(source: str) -> str:
    """What the encoder ``source`` is: a hub id as named, a local or packaged folder by the SHA-256 of its
    config and weight files (a folder rewritten in place is another encoder)."""
    found = resolve_encoder_source(source)
    if found.kind == "hub":
        return f"hub:{found.location}"
    digest = hashlib.sha256()
    for path in sorted(Path(found.location).iterdir()):
        if path.is_file() and path.suffix in _ENCODER_FILES:
            digest.update(path.name.encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return f"{found.kind}:{digest.hexdigest()}"
