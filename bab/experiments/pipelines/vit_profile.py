"""The shape of Sparsifiner's ViT study (``bab.experiments.pipelines.vit``): ``ViTProfile`` (sizes, epochs and each
step's recipe), the recipe values its steps derive (EViT's fine-tune, the hard head adaptation, the gates' start),
``recipe_profile`` (the profile ``SparsifinerClassifier.fit`` runs) and the connectivity-predictor presets, the
profile's variants notebook 05 trains and chooses among on validation. The notebook's own sizes are in
``bab.experiments.vit.profiles``."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from bab.core.timing import Repeats
from bab.heads import train as heads_train
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.recipe import SparsifinerRecipe
from bab.sparsifiner.train import ViTTrainConfig
from bab.sparsifiner.vit import ViTClassifierConfig


@dataclass(frozen=True)
class ViTProfile:
    """Notebook 05: Sparsifiner (and its baselines) on a small ViT trained on Fashion-MNIST."""

    name: str
    num_train: int
    num_val: int
    num_test: int
    model: dict  # ViTClassifierConfig fields other than predictor / linformer
    dense: ViTTrainConfig
    phase1: ViTTrainConfig
    phase2: ViTTrainConfig
    heads: heads_train.TrainConfig  # the heads method's recipe: budgeted soft gates (its gate start included)
    seed: int = 13
    # The connectivity predictor. The paper's tau = 0.05 with n_down = 32 and prune threshold 1e-2 with n = 197 are
    # relative to the uniform levels 1/n_down and 1/n (tau = 1.6 / n_down, threshold ~ 2 / n); these keep those
    # ratios for n_down = 8, n = 50. The other options: the defaults, the paper's text (docs/sparsifiner.md).
    connectivity: ConnectivityConfig = ConnectivityConfig(n_down=8, tau=0.2, up_prune=0.04)
    sweep_keep_rates: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.1, 0.05)
    report_keep_rates: tuple[float, ...] = (0.5, 0.25, 0.1)
    linformer_keep_rate: float = 0.25  # Linformer's projection length = ceil(0.25 * n), Sparsifiner's budget there
    token_keep_rates: tuple[float, ...] = (0.7, 0.5)  # EViT's keep rates in the paper's Table 1
    prune_layers: tuple[int, ...] = (1, 2)  # after the attention of these layers (EViT: layers 4, 7, 10 of 12)
    combo_keep_rate: float = 0.25  # Sparsifiner keep rate combined with token pruning (Table 1)
    # Epochs of the two token-pruning fine-tunes (Table 1, like for like): EViT (the dense ViT fine-tuned with its
    # tokens pruned, ``ViTStudy.evit``) and Sparsif-EViT (phase 2 with its tokens pruned, ``ViTStudy.
    # evit_sparsifiner``), the same for both so neither gets more training than the other.
    evit_epochs: int = 1
    head_budgets: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)
    flop_examples: int = 16  # examples FlopCounterMode runs on
    # the attention-core speed benchmark (bab.sparsifiner.bench) the notebook runs; the CLI runs the full grid
    bench_tokens: tuple[int, ...] = (197, 577, 1025)
    bench_keep_rates: tuple[float, ...] = (0.5, 0.25, 0.1)
    bench_repeats: int | Repeats = 10  # a count, or Repeats: until the speed-ups' intervals are tight
    # Which predictor the notebook's Sparsifiner rows (phase 1, the sweep, EViT + Sparsifiner, the figures) use:
    # "profile", the one above, or "validation", the preset of PREDICTOR_PRESETS with the best mean validation
    # accuracy over report_keep_rates (choose_predictor_preset). Every preset is trained and reported either way.
    predictor_choice: str = "profile"
    # The same method at the paper's 197 tokens (a ViTProfile of its own: model, sizes, epochs); None: not run.
    variant_197: ViTProfile | None = None
    # Why a profile that stands for the paper's protocol trains less than it does ("" where it does not): the
    # claims' setup column and the dense row's note say "smaller than the paper" with this reason.
    smaller_than_paper: str = ""
    # the seeds the report runs notebook 05 at, once each (bab.report.results.seeds); (): once, at ``seed``
    report_seeds: tuple[int, ...] = ()
    # what this profile trains or measures less than the paper's protocol (or, where the paper's ImageNet protocol
    # has no counterpart, than the paper profile), each named once: the record's claims say so in their setup column
    reductions: tuple[str, ...] = ()

    def __post_init__(self):
        if self.heads.objective != "budgeted":
            raise ValueError(f"ViTProfile.heads is the soft budgeted-heads step: objective 'budgeted', got "
                             f"{self.heads.objective!r} (the hard adaptation is derived from it, hard_heads_config)")
        if isinstance(self.evit_epochs, bool) or not isinstance(self.evit_epochs, int) or self.evit_epochs < 1:
            raise ValueError(f"evit_epochs must be a whole number of epochs >= 1, got {self.evit_epochs!r}")
        if self.predictor_choice not in PREDICTOR_CHOICES:
            raise ValueError(f"predictor_choice must be one of {PREDICTOR_CHOICES}, got {self.predictor_choice!r}")
        if self.variant_197 is not None:
            tokens = ViTClassifierConfig(**self.variant_197.model).num_tokens
            if tokens != 197:
                raise ValueError(f"variant_197 must be a ViTProfile whose model has 197 tokens (e.g. 28 x 28 images "
                                 f"in 2 x 2 patches), got {tokens}: change its image_size / patch_size")
            if self.variant_197.variant_197 is not None:
                raise ValueError("variant_197 is a variant of one profile: it cannot hold a variant of its own")

    @property
    def protocol(self) -> str:
        """How much this profile trains, in words (the dense row's note, and so the claims' setup column)."""
        scale = (f"{self.num_train:,} training images; epochs: dense {self.dense.epochs}, phase 1 {self.phase1.epochs} "
                 f"(paper 5), phase 2 {self.phase2.epochs} (paper 40)")
        return f"smaller than the paper ({self.smaller_than_paper}); {scale}" if self.smaller_than_paper else scale


# "profile": the ViTProfile's own predictor; "validation": the preset chosen on validation (choose_predictor_preset)
PREDICTOR_CHOICES = ("profile", "validation")

# EViT fine-tuned (Table 1's baseline as its paper trains it: CE only, the tokens pruned in the training forward),
# warm-started from the dense ViT with phase 2's optimiser settings (lr 3e-4: the backbone is already trained, as
# EViT's own fine-tune of a pretrained DeiT lowers its lr). The token keep rate and prune layers are the profile's.
EVIT_FINE_TUNE = ViTTrainConfig(objective="dense", lr=3e-4, batch_size=128)
# The hard adaptation (Eq. 6) distils from the dense ViT at temperature 1 with kd_beta 1/3: (2/3) CE + (1/3) KL is
# the ViT recipe's CE + 0.5 KL up to the factor 2/3.
_VIT_HARD_ADAPTATION = dict(kd_teacher="dense", kd_beta=1 / 3, kd_temperature=1.0)


def hard_heads(heads: heads_train.TrainConfig) -> heads_train.TrainConfig:
    """The hard adaptation's recipe from the soft step's ``heads``: its settings with Eq. 6 distilled from the dense
    ViT (``_VIT_HARD_ADAPTATION``); the gates are the soft checkpoint's, so the gate start goes back to "flat"."""
    return replace(heads, objective="hard_adapt", adaptation=replace(heads.adaptation, **_VIT_HARD_ADAPTATION),
                   gate_start=replace(heads.gate_start, how="flat"))


# The gates start at sigmoid(2) = 0.88 before any nesting, so a dense warm start keeps its function at first
GATE_INIT_LOGIT = 2.0


def recipe_profile(recipe: SparsifinerRecipe, num_train: int, seed: int) -> ViTProfile:
    """A profile holding ``recipe`` as it is (what ``SparsifinerClassifier.fit`` runs through the study's steps on
    a user's ``num_train`` images): its shape, predictor and three steps; no validation or test split."""
    return ViTProfile(name="recipe", num_train=num_train, num_val=0, num_test=0, model=recipe.model,
                      dense=recipe.dense, phase1=recipe.phase1, phase2=recipe.phase2,
                      heads=heads_train.TrainConfig(objective="budgeted"), seed=seed, connectivity=recipe.connectivity)


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
