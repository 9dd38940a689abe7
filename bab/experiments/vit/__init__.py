"""Notebook 05's study: a small ViT on Fashion-MNIST, Sparsifiner, and its baselines on one cost axis.

Every trained model goes through the run cache (``bab.experiments.study.Study``), keyed by its whole lineage
(data, model, training, and the run it started from), so the notebook re-runs in seconds once its models exist:

    dense teacher -> Sparsifiner phase 1 (predictor) -> phase 2 (joint), once per predictor preset
                                                     -> Sparsif-EViT: phase 2 with its tokens pruned (Table 1)
                  -> Linformer at the same budget (warm start, same recipe as phase 2)
                  -> budgeted head gates (warm start, Eq. 5) -> hard top-k heads (Eq. 6, straight-through)
                  -> EViT fine-tuned with its tokens pruned (warm start, CE; Table 1)

and the dense -> phase 1 -> phase 2 chain again at 197 tokens (``ViT197Study``), beside the 50-token model trained
with the same recipe (``token_count_control``).

Every model is transformers' ``ViTForImageClassification`` with the methods attached: Sparsifiner, Linformer and
EViT by ``bab.sparsifiner`` (``build_vit``), the head gates by the heads method (``bab.heads.attach`` through
``GatedHFClassifier``), trained by its own loop and recipe options (``bab.heads.train.TrainConfig``).

Modules: ``profiles`` (``VIT``: the sizes of ``ViTProfile``, ``bab.experiments.pipelines.vit_profile``), ``study``
(the rows, the 197-token variant of ``bab.experiments.pipelines.vit.ViTStudy``), ``analysis`` (preset choice, the
197-token carry-over, the ablations).
"""
from bab.experiments.pipelines.vit import ViTStudy, cached_sparsifiner
from bab.experiments.pipelines.vit_profile import (
    GATE_INIT_LOGIT,
    OFFICIAL_PRUNE_RATIO,
    OFFICIAL_TOP_M_FRACTION,
    PAPER_TEXT_PREDICTOR,
    PREDICTOR_CHOICES,
    PREDICTOR_PRESETS,
    PresetChoice,
    ViTProfile,
    official_preset,
    paper_text_preset,
    predictor_preset,
)
from bab.experiments.vit.analysis import (
    carry_over,
    carry_over_sentence,
    choose_predictor_preset,
    gaps_against_dense,
    head_gate_ablation,
    head_gate_variants,
    pick_preset,
    predictor_ablation,
    predictor_ablation_variants,
    preset_validation,
    token_count_control,
    two_standard_errors,
)
from bab.experiments.vit.profiles import VIT
from bab.experiments.vit.study import METHOD_SETS, VIT_197_METHODS, VIT_METHODS, ViT197Study

__all__ = ["GATE_INIT_LOGIT", "METHOD_SETS", "OFFICIAL_PRUNE_RATIO", "OFFICIAL_TOP_M_FRACTION", "PAPER_TEXT_PREDICTOR",
           "PREDICTOR_CHOICES", "PREDICTOR_PRESETS", "VIT", "VIT_197_METHODS", "VIT_METHODS",
           "PresetChoice", "ViT197Study", "ViTProfile", "ViTStudy", "cached_sparsifiner", "carry_over",
           "carry_over_sentence", "choose_predictor_preset", "gaps_against_dense", "head_gate_ablation",
           "head_gate_variants", "official_preset", "paper_text_preset", "pick_preset", "predictor_ablation",
           "predictor_ablation_variants", "predictor_preset", "preset_validation", "token_count_control",
           "two_standard_errors"]
