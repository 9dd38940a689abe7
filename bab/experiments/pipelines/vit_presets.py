"""The connectivity-predictor presets notebook 05 trains and chooses among on validation."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from bab.experiments.pipelines.vit_profile import ViTProfile
from bab.sparsifiner.predictor import ConnectivityConfig

# "profile": the ViTProfile's own predictor (at every profile: four of the official code's options, chosen on
# validation at quick against the paper's text; its phase 2 keeps the predictor frozen). "paper_text": the paper's
# text as we read it (ConnectivityConfig's defaults: coefficients above tau, every query predicted, signed W_up,
# 1/sqrt(d)) with its joint phase 2 (paper_text_preset). "official": ConnectivityConfig.official() at the profile's
# size, with the official code's phase 2, which leaves the predictor out of the optimizer (official_preset).
PREDICTOR_PRESETS = ("profile", "paper_text", "official")
PAPER_TEXT_PREDICTOR = dict(cls_dense=False, coefficients="threshold", basis_threshold_abs=False,
                            predictor_scale="head_dim")
# The official config's W_up prune threshold (2e-2) against the paper's (1e-2); the official top 8 of n_down = 32
# coefficients is a quarter of them.
OFFICIAL_PRUNE_RATIO = 2.0
OFFICIAL_TOP_M_FRACTION = 0.25


def paper_text_connectivity(connectivity: ConnectivityConfig) -> ConnectivityConfig:
    """The paper's text (``ConnectivityConfig``'s defaults) at ``connectivity``'s n_down, tau and prune threshold."""
    return ConnectivityConfig(n_down=connectivity.n_down, tau=connectivity.tau, up_prune=connectivity.up_prune,
                              **PAPER_TEXT_PREDICTOR)


def paper_text_preset(profile: ViTProfile) -> ViTProfile:
    """``profile`` with the paper's text: the predictor's defaults (``PAPER_TEXT_PREDICTOR``) at the profile's
    n_down, tau and prune threshold, and phase 2 training the predictor jointly with the backbone, as the paper's
    text says, at the paper's lambda_attn = 0 (``ViTTrainConfig``'s ``joint_predictor``): the hard top-k passes
    the other losses no gradient, so only AdamW's weight decay moves the predictor."""
    return replace(profile, connectivity=paper_text_connectivity(profile.connectivity),
                   phase2=replace(profile.phase2, joint_predictor=True, lambda_attn_joint=0.0))


def official_preset(profile: ViTProfile) -> ViTProfile:
    """``profile`` with the official code's whole predictor, ``ConnectivityConfig.official()``, scaled to the
    profile's model the way the profile scales the paper's values: n_down and tau stay the profile's (the paper's
    n_down / n ratio, which is also the official N // 6: 8 at 50 tokens, 32 at 197), the W_up prune threshold is
    the profile's times 2 (official 2e-2 against the paper's 1e-2; 0.08 at 50 tokens, ~4 / n as 2e-2 ~ 4 / 197)
    and the top-m count a quarter of n_down (official 8 of 32; 2 of 8 at 50 tokens). Phase 2 is the profile's,
    with the predictor frozen, as the official code's default schedule leaves it out of the optimizer."""
    mine = profile.connectivity
    official = ConnectivityConfig.official(n_down=mine.n_down, tau=mine.tau,
                                           up_prune=OFFICIAL_PRUNE_RATIO * mine.up_prune,
                                           top_m=max(1, round(OFFICIAL_TOP_M_FRACTION * mine.n_down)))
    return replace(profile, connectivity=official)


def predictor_preset(profile: ViTProfile, preset: str) -> ViTProfile:
    """``profile`` with the predictor preset ``preset`` (``PREDICTOR_PRESETS``). Only the predictor and phase 2
    change, so the dense teacher (and Linformer, the head gates) are the same runs."""
    if preset == "profile":
        return profile
    if preset == "paper_text":
        return paper_text_preset(profile)
    if preset == "official":
        return official_preset(profile)
    raise ValueError(f"unknown predictor preset {preset!r}; the presets are {PREDICTOR_PRESETS}")


@dataclass(frozen=True)
class PresetChoice:
    """The predictor preset chosen on validation: ``table`` (one row per preset: accuracy at each keep rate in points
    against the dense model, and their mean), ``chosen`` (its name) and ``reason`` (one sentence from the numbers)."""

    table: pd.DataFrame
    chosen: str
    reason: str
