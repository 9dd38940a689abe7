"""Notebook 05's study: a small ViT on Fashion-MNIST, Sparsifiner, and its baselines on one cost axis.

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
