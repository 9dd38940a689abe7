"""Sparsifiner's recipe: the ViT shape, the connectivity predictor and the three training steps with their
defaults, as ``SparsifinerClassifier.fit`` trains them on a user's images. Notebook 05's profiles size this recipe
(epochs, data) for smoke / quick / record / paper; tuning a profile never changes what ``fit`` trains.

The values and their reasons (docs/sparsifiner.md):

- the shape: DeiT-tiny-like, sized for 2 CPU cores: 28x28 images in 4x4 patches = 49 patches + CLS = 50 tokens,
  4 layers x 4 heads of width 16 (hidden 64, MLP 128);
- the predictor: n_down = 8 keeps the paper's ratio n_down / n (32 / 197 ~ 0.16; 8 / 50 = 0.16); the paper's
  tau = 0.05 with n_down = 32 and prune threshold 1e-2 with n = 197 are relative to the uniform levels 1/n_down and
  1/n (tau = 1.6 / n_down, threshold ~ 2 / n), kept for n_down = 8, n = 50; the official code's options, not the
  paper's text: CLS attends densely, the top m coefficients per query (official: 8 of n_down 32, here 2 of 8, the
  same quarter), the |W_up| basis threshold and the 1/sqrt(num_heads) scale. Chosen on validation at notebook 05's
  quick profile (seed 13): 1.0 / 2.5 points under dense at keep 0.25 / 0.1, against 2.1 / 5.4 with the paper-text
  semantics;
- dense: AdamW with weight decay 0.05 (DeiT's); lr 3e-3 because a tiny ViT from scratch on few examples is slow;
  10 epochs;
- phase 1: lambda_attn = 1 and lambda_token = lambda_kl = 0 (the paper); the L2 on W_up is AdamW's weight decay
  0.05, as the paper does instead of adding lambda_spa (its Eq. 12); 2 epochs;
- phase 2: lambda_token = lambda_kl = 0.5 (the paper); a lower lr because the backbone is already trained; the keep
  rate drawn per batch so one checkpoint serves every keep rate (our choice); 8 epochs (on validation 0.1 / 1.0
  points under dense at keep 0.25 / 0.1 against 1.0 / 2.5 after 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.train import ViTTrainConfig

VIT_SHAPE = dict(image_size=28, patch_size=4, num_channels=1, hidden_size=64, num_layers=4, num_heads=4,
                 intermediate_size=128, num_classes=10, dropout=0.0)


@dataclass(frozen=True)
class SparsifinerRecipe:
    """The shape (``ViTClassifierConfig`` fields other than the predictor's), the predictor and the three steps'
    ``ViTTrainConfig``s."""

    model: dict = field(default_factory=lambda: dict(VIT_SHAPE))
    connectivity: ConnectivityConfig = ConnectivityConfig(
        n_down=8, tau=0.2, up_prune=0.04,
        cls_dense=True, coefficients="topm", top_m=2, basis_threshold_abs=True, predictor_scale="num_heads")
    dense: ViTTrainConfig = ViTTrainConfig(objective="dense", epochs=10, lr=3e-3, batch_size=128)
    phase1: ViTTrainConfig = ViTTrainConfig(objective="predictor", epochs=2, lr=3e-3, batch_size=128,
                                            weight_decay=0.05)
    phase2: ViTTrainConfig = ViTTrainConfig(objective="joint", epochs=8, lr=3e-4, batch_size=128,
                                            keep_rates=(0.1, 0.25, 0.5, 1.0))


RECIPE = SparsifinerRecipe()
