"""Notebook 05's profiles: ``ViTProfile`` and its smoke / quick / paper sizes (``VIT``), each value's reason
beside it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core.timing import Repeats
from bab.heads import train as heads_train
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.recipe import RECIPE, SparsifinerRecipe
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


# The 50-token model, its predictor and the dense / phase 1 / phase 2 steps are Sparsifiner's recipe
# (bab.sparsifiner.recipe, each value's reason there); the profiles below size it (epochs, data).
_VIT_MODEL = RECIPE.model
_VIT_DENSE, _VIT_PHASE1, _VIT_PHASE2 = RECIPE.dense, RECIPE.phase1, RECIPE.phase2
# EViT fine-tuned (Table 1's baseline as its paper trains it: CE only, the tokens pruned in the training forward),
# warm-started from the dense ViT with phase 2's optimiser settings (lr 3e-4: the backbone is already trained, as
# EViT's own fine-tune of a pretrained DeiT lowers its lr). The token keep rate and prune layers are the profile's.
_VIT_EVIT = ViTTrainConfig(objective="dense", lr=3e-4, batch_size=128)
# Budgeted heads on the same ViT, by the heads method's recipe (bab.heads.train): the AG News setting of Eq. 5
# (lambda_cost 0.05, lambda_viol 20) with the ViT's optimiser settings (phase 2's lr 3e-4, DeiT's weight decay 0.05,
# 10% warm-up). The gates start nested by greedy backward elimination (slope 4 in logit(b)), scored on 500 training
# images at quick (128 at smoke), and soft and hard phases run 6 epochs at quick: chosen on validation at quick
# (docs/sparsifiner.md, "Head gates that commit"; head_gate_ablation below): mean hard accuracy over
# b = 0.25 / 0.5 / 0.75 / 1.0 of 82.1% against 68.2% with flat gates (3 epochs), whose soft model shrank every head
# alike.
_VIT_HEADS = heads_train.TrainConfig(objective="budgeted", lr=3e-4, batch_size=128, weight_decay=0.05,
                                     warmup_fraction=0.1, lambda_cost=0.05, lambda_viol=20.0,
                                     gate_start=heads_train.GateStart("elimination", sharpness=4.0, examples=2000))
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

# The same method at the paper's token count: 28 x 28 images in 2 x 2 patches = 196 patches + CLS = 197 tokens,
# DeiT-S's count and that of 56 x 56 up-sampled images in 4 x 4 patches, without interpolating any pixel. The model
# keeps the 50-token ViT's width, layers and heads, so the token count is what changes. The predictor takes the
# paper's own sizes at 197 tokens (n_down 32, tau 0.05, W_up pruned below 1e-2) with the profiles' four official
# options, the official top 8 of 32 coefficients among them. Attention costs ~16x the 50-token model's and the rest
# ~4x, and the torch predictor ranks 197 x 197 scores per head, so the recipe is smaller than the 50-token one
# (fewer images and epochs); the same recipe at 50 tokens (token_count_control) is the like-for-like reference.
_VIT_197_MODEL = dict(_VIT_MODEL, patch_size=2)
_PREDICTOR_197 = RECIPE.connectivity.replace(n_down=32, tau=0.05, up_prune=1e-2, top_m=8)


def _variant_197(name, num_train, num_test, dense_epochs, phase1_epochs, phase2_epochs,
                 smaller_than_paper="") -> ViTProfile:
    return ViTProfile(name=f"{name}, 197 tokens", num_train=num_train, num_val=200, num_test=num_test,
                      model=_VIT_197_MODEL, connectivity=_PREDICTOR_197, dense=replace(_VIT_DENSE, epochs=dense_epochs),
                      phase1=replace(_VIT_PHASE1, epochs=phase1_epochs),
                      phase2=replace(_VIT_PHASE2, epochs=phase2_epochs), heads=_VIT_HEADS,
                      smaller_than_paper=smaller_than_paper)


VIT = {
    "smoke": ViTProfile(
        name="smoke", num_train=3000, num_val=200, num_test=500, model=_VIT_MODEL,
        connectivity=RECIPE.connectivity,
        dense=replace(_VIT_DENSE, epochs=8), phase1=replace(_VIT_PHASE1, epochs=1),
        phase2=replace(_VIT_PHASE2, epochs=1), heads=replace(_VIT_HEADS, epochs=2).ranked_on(128),
        # the token-pruning fine-tunes for one epoch, as phase 2 (~4 s EViT and ~13 s Sparsif-EViT a keep rate)
        evit_epochs=1,
        bench_tokens=(197, 577), bench_keep_rates=(0.1,), bench_repeats=3,
        # the 197-token code path at a tiny size (CI runs it under nbval)
        variant_197=_variant_197("smoke", num_train=300, num_test=200, dense_epochs=2, phase1_epochs=1,
                                 phase2_epochs=1),
    ),
    "quick": ViTProfile(
        # the nested gate start ranks heads on 500 training images, not 2,000 as when the recipe was chosen:
        # elimination over 16 heads is 136 passes, most of the budgeted-heads step at 2,000
        name="quick", num_train=10000, num_val=1000, num_test=5000, model=_VIT_MODEL,
        connectivity=RECIPE.connectivity,
        dense=replace(_VIT_DENSE, epochs=10), phase1=replace(_VIT_PHASE1, epochs=2),
        # phase 2 for 8 epochs, not 4: on validation 0.1 / 1.0 points under dense at keep 0.25 / 0.1, not 1.0 / 2.5
        phase2=replace(_VIT_PHASE2, epochs=8), heads=replace(_VIT_HEADS, epochs=6).ranked_on(500),
        # the token-pruning fine-tunes for 4 epochs, half of phase 2's 8: ~9 s an epoch for EViT and ~28 s for
        # Sparsif-EViT on one thread, so ~5 minutes for both at both token keep rates (8 would take ~10)
        evit_epochs=4,
        # the sweep at 9 keep rates (each a pass over the 5,000 test images), the paper's 0.5 / 0.25 / 0.1 among them;
        # the attention bench: as many repeats as its speed-ups need to be known to +-5%, 3 to 8
        sweep_keep_rates=(1.0, 0.7, 0.5, 0.4, 0.3, 0.25, 0.2, 0.1, 0.05),
        bench_repeats=Repeats(3, target=0.05, maximum=8),
        # 197 tokens within ~6 minutes of one thread (the whole quick report stays under an hour on two cores):
        # 3,000 training images (not 10,000), dense 6 epochs (not 10), phase 1 1 (not 2), phase 2 1 (not 8), 1,000
        # test images (not 5,000)
        variant_197=_variant_197("quick", num_train=3000, num_test=1000, dense_epochs=6, phase1_epochs=1,
                                 phase2_epochs=1),
    ),
    # The paper's protocol at our scale: the whole training file, the whole test file, phase 1 for 5 epochs
    # and phase 2 for 40 (the paper's epoch counts; its DeiT-S teacher is pretrained for 300 epochs).
    "paper": ViTProfile(
        name="paper", num_train=55000, num_val=5000, num_test=10000, model=_VIT_MODEL,
        connectivity=RECIPE.connectivity,
        dense=replace(_VIT_DENSE, epochs=50), phase1=replace(_VIT_PHASE1, epochs=5),
        phase2=replace(_VIT_PHASE2, epochs=40), heads=replace(_VIT_HEADS, epochs=10),
        # the token-pruning fine-tunes for 40 epochs: Sparsif-EViT is the paper's phase 2 (40 epochs) with the tokens
        # pruned, and EViT gets the same fine-tuning from the same dense model (EViT's own fine-tune of a pretrained
        # DeiT-S runs 30 epochs; its 300-epoch training from scratch is the dense teacher's 50 here)
        evit_epochs=40,
        bench_repeats=Repeats(5, target=0.03, maximum=30),
        # the Sparsifiner rows from the predictor preset with the best validation accuracy (all are trained)
        predictor_choice="validation",
        variant_197=_variant_197(
            "paper", num_train=20000, num_test=5000, dense_epochs=10, phase1_epochs=2, phase2_epochs=3,
            smaller_than_paper="20,000 training images, phase 2 for 3 epochs: at ~29 ms an image a step on one "
                               "thread, phase 2 alone would take ~18 h at the 50-token recipe's sizes"),
    ),
}


def recipe_profile(recipe: SparsifinerRecipe, num_train: int, seed: int) -> ViTProfile:
    """A profile holding ``recipe`` as it is (what ``SparsifinerClassifier.fit`` runs through the study's steps on
    a user's ``num_train`` images): its shape, predictor and three steps; no validation or test split."""
    return ViTProfile(name="recipe", num_train=num_train, num_val=0, num_test=0, model=recipe.model,
                      dense=recipe.dense, phase1=recipe.phase1, phase2=recipe.phase2,
                      heads=heads_train.TrainConfig(objective="budgeted"), seed=seed, connectivity=recipe.connectivity)
