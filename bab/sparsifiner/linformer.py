"""Linformer-style low-rank attention (Wang et al. 2020), the Sparsifiner paper's Table 4 baseline.

Keys and values are projected along the token axis to ``proj_len`` rows with learned matrices
E, F [proj_len, n] (one pair per layer, shared by the heads, as Linformer's head-wise sharing):

    out = softmax(Q (E K)^T / sqrt(d)) (F V)        Q: [n, d], E K and F V: [proj_len, d]

The attention matrix is [n, proj_len]: low rank, unlike Sparsifiner's sparse full-rank one.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LinformerProjection(nn.Module):
    def __init__(self, max_tokens: int, proj_len: int):
        super().__init__()
        if not 1 <= proj_len <= max_tokens:
            raise ValueError(f"proj_len must lie in [1, {max_tokens}] (the token count), got {proj_len}")
        self.proj_len = proj_len
        self.e = nn.Parameter(torch.randn(proj_len, max_tokens) / math.sqrt(max_tokens))
        self.f = nn.Parameter(torch.randn(proj_len, max_tokens) / math.sqrt(max_tokens))

    def forward(self, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k, v [B, H, n, d] -> (out [B, H, n, d], low-rank probabilities [B, H, n, proj_len])."""
        n = k.shape[-2]
        k_proj = torch.einsum("pn,bhnd->bhpd", self.e[:, :n], k)
        v_proj = torch.einsum("pn,bhnd->bhpd", self.f[:, :n], v)
        probs = torch.softmax(q @ k_proj.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        return probs @ v_proj, probs


def linformer_macs(n: int, proj_len: int, hidden: int) -> float:
    """Projecting K and V (2 * proj_len * n * D) plus QK'^T and AV' (2 * n * proj_len * D), per layer and example."""
    return 4.0 * n * proj_len * hidden
