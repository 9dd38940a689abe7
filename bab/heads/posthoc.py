"""Post-hoc head pruning of a trained dense model (the baseline of section 6.1 and Table 8).

Each head is scored by how much the validation loss rises when that head alone is masked; the
best k = ceil(b * L * H) heads are kept under a per-layer floor, so every layer keeps a head.
"""

from __future__ import annotations

import torch

from bab.heads.evaluate import evaluate
from bab.heads.gates import hard_topk_mask_with_floor


@torch.no_grad()
def head_importance(model, val_data, batch_size: int = 256) -> torch.Tensor:
    """[L, H] validation-loss increase when each head alone is masked (higher = more important)."""
    L, H = model.config.num_layers, model.config.num_heads
    base = evaluate(model, val_data, mode="dense", batch_size=batch_size)["loss"]
    scores = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            mask = torch.ones(L, H)
            mask[layer, head] = 0.0
            masked = evaluate(model, val_data, mode="hard", head_mask=mask, batch_size=batch_size)
            scores[layer, head] = masked["loss"] - base
    return scores


def posthoc_mask(importance: torch.Tensor, budget: float, min_per_layer: int = 1) -> torch.Tensor:
    """Keep the ceil(b * L * H) most important heads, at least ``min_per_layer`` in every layer."""
    return hard_topk_mask_with_floor(importance, budget, min_per_layer)
