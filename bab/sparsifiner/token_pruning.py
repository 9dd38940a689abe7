"""EViT-style token pruning (Liang et al. 2022), the Sparsifiner paper's Table 1 baseline.

At fixed layers, after attention, keep the CLS token and the ceil(keep * (n - 1)) patch tokens the
CLS token attends to most (attention averaged over heads); drop the rest. EViT also fuses the dropped
tokens into one extra token; we drop them (no fusion), the simpler variant, as docs/sparsifiner.md says.
"""

from __future__ import annotations

import math

import torch

from bab.core.budget import validate_fraction


def validate_token_keep(token_keep) -> float:
    return validate_fraction(token_keep, "token_keep", "the fraction of patch tokens kept at each pruning layer",
                             "use 1.0 to keep every token and e.g. 0.7 to keep 70% (CLS is always kept)")


def prune_tokens(x: torch.Tensor, cls_attention: torch.Tensor, token_keep: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, n, D] (token 0 is CLS), cls_attention [B, H, n] (CLS row of this layer's attention).

    Returns (x [B, 1 + kept, D], kept patch positions [B, kept] into the current sequence, sorted).
    """
    token_keep = validate_token_keep(token_keep)
    num_patches = x.shape[1] - 1
    kept = max(1, math.ceil(round(token_keep * num_patches, 9)))
    score = cls_attention.mean(1)[:, 1:]  # [B, n - 1]: attention from CLS to each patch, averaged over heads
    index = torch.topk(score, kept, dim=-1).indices.sort(dim=-1).values + 1  # +1 skips CLS
    patches = torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    return torch.cat([x[:, :1], patches], dim=1), index
