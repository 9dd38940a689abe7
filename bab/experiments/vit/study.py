"""Notebook 05's study: the rows it reports (``VIT_METHODS``) and its 197-token variant (``ViT197Study``) of the ViT
pipeline (``bab.experiments.pipelines.vit.ViTStudy``)."""

from __future__ import annotations

from bab.experiments.methods import methods
from bab.experiments.pipelines.vit import ViTStudy

# The rows notebook 05 reports: (attribute, method name, mechanism, budget kind, origin[, settings]). Budgets are
# attention keep rates, token keep rates (EViT) or head budgets; EViT + Sparsifiner rows carry their token keep rate.
VIT_METHODS = methods(
    "vit_sparsifiner",
    ("dense", "dense", "none", "dense", "paper"),
    ("sparsifiner", "sparsifiner", "connections", "fraction", "paper"),
    ("phase1_only", "sparsifiner, phase 1 only", "connections", "fraction", "paper"),
    ("evit", "token pruning (EViT)", "tokens", "fraction", "baseline"),
    ("evit_sparsifiner", "EViT + sparsifiner", "tokens + connections", "fraction", "paper", ("token_keep",)),
    # the two above trained with their tokens pruned, as the paper trains them (ViTStudy.evit, .evit_sparsifiner)
    ("evit_finetuned", "token pruning (EViT), fine-tuned", "tokens", "fraction", "baseline"),
    ("evit_sparsifiner_finetuned", "EViT + sparsifiner, fine-tuned", "tokens + connections", "fraction", "paper",
     ("token_keep",)),
    # its projection length is the connection count of Sparsifiner at linformer_keep_rate (the note says which);
    # the paper's Table 4 gives no rate, so neither row carries a budget
    ("linformer", "linformer (equal budget)", "low rank", "none", "baseline"),
    ("heads", "budgeted heads (hard top-k)", "heads", "fraction", "ours"),
    ("attention_speed", "attention core speed", "connections", "fraction", "paper", ("tokens",)),
    # phase 2 of each predictor preset (PREDICTOR_PRESETS) at the report's keep rates, told apart by the preset
    ("preset", "sparsifiner, predictor preset", "connections", "fraction", "paper", ("preset",)),
)
# The 197-token variant (ViTProfile.variant_197): its own experiment, so its rows are measured against its own dense
VIT_197_METHODS = methods(
    "vit_sparsifiner_197",
    ("dense", "dense", "none", "dense", "paper"),
    ("sparsifiner", "sparsifiner", "connections", "fraction", "paper"),
)
METHOD_SETS = (VIT_METHODS, VIT_197_METHODS)


class ViT197Study(ViTStudy):
    """Notebook 05's dense -> phase 1 -> phase 2 steps at 197 tokens (``ViTProfile.variant_197``): its own
    experiment, so its rows and runs are told apart from the 50-token ones and measured against its own dense."""

    experiment = "vit_sparsifiner_197"
