"""Notebook 05's profiles: its smoke / quick / record / paper sizes (``VIT``) of ``ViTProfile``
(``bab.experiments.pipelines.vit_profile``), each value's reason beside it."""

from __future__ import annotations

from dataclasses import replace

from bab.core.timing import Repeats
from bab.experiments.pipelines.vit_profile import ViTProfile
from bab.heads import train as heads_train
from bab.sparsifiner.recipe import RECIPE

# The 50-token model, its predictor and the dense / phase 1 / phase 2 steps are Sparsifiner's recipe
# (bab.sparsifiner.recipe, each value's reason there); the profiles below size it (epochs, data).
_VIT_MODEL = RECIPE.model
_VIT_DENSE, _VIT_PHASE1, _VIT_PHASE2 = RECIPE.dense, RECIPE.phase1, RECIPE.phase2
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


_QUICK = ViTProfile(
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
)

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
    "quick": _QUICK,
    # The record (each seed's run at most an hour on one core, docs/record.md). On one loaded core an image-epoch
    # costs ~0.9 ms dense, ~1.5 ms phase 1, ~1.5 ms phase 2 (~5 ms in its first epoch, which runs the teacher), ~2.4
    # and ~5 ms the soft and hard head gates; at 197 tokens ~6 / ~18 / ~39 ms. Three presets' phase 2, the head gates
    # and the token-pruning fine-tunes at quick's sizes are ~30 minutes of a seed's run, so the record trains as
    # quick does (the paper profile's 55,000 images for 50 / 5 / 40 epochs would take days) and measures on the whole
    # test file; the 197-token phase 2 runs two epochs, not one.
    "record": replace(
        _QUICK, name="record", num_test=10000,
        # as at paper: every preset is trained either way, so choosing on validation costs nothing
        predictor_choice="validation",
        variant_197=_variant_197(
            "record", num_train=3000, num_test=2000, dense_epochs=6, phase1_epochs=1, phase2_epochs=2,
            smaller_than_paper="each seed's run of the record within an hour on one core"),
        report_seeds=(7, 13, 21),
        reductions=("10,000 of the paper profile's 55,000 training images (the paper: ImageNet)",
                    "1,000 of its 5,000 validation images", "dense teacher 10 of its 50 epochs (the paper's DeiT-S: "
                    "300)", "phase 1 2 of the paper's 5 epochs", "phase 2 8 of the paper's 40 epochs",
                    "EViT and Sparsif-EViT fine-tuned 4 of the paper profile's 40 epochs",
                    "head gates 6 of its 10 epochs", "the sweep at 9 of its 12 keep rates",
                    "the 197-token variant on 3,000 of its 20,000 training images for 6 / 1 / 2 of its 10 / 2 / 3 "
                    "epochs, tested on 2,000 of its 5,000 images",
                    "the attention bench to +-5% in at most 8 repeats (the paper profile: +-3%, 30)"),
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
