"""The masks and the SDPA call shared by the "bab_context" and "bab_eviction" attentions.

transformers builds one boolean mask per forward (causality, padding, a sliding window) through the mask
implementation registered here, always materialised; each attention then narrows it to what its cache kept.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers.masking_utils import sdpa_mask

__all__ = ["allowed_mask", "always_materialised_mask", "attend", "open_empty_rows"]


def allowed_mask(attention_mask: torch.Tensor | None, q_len: int, k_len: int, device) -> torch.Tensor:
    """Bool [B or 1, 1, T, K]: transformers' mask (causal and padding), or the causal mask aligned at the end."""
    if attention_mask is None:
        q_pos = torch.arange(k_len - q_len, k_len, device=device)
        return (torch.arange(k_len, device=device)[None, :] <= q_pos[:, None])[None, None]
    if attention_mask.dtype != torch.bool:
        raise TypeError(f"expected a boolean attention mask (the mask implementation registered beside the attention "
                        f"makes one), got {attention_mask.dtype}")
    return attention_mask


def attend(query, key, value, mask, dropout: float, scaling: float | None) -> torch.Tensor:
    """SDPA of query [B, H, t, Dh] over key/value [B, G, k, Dh] with a boolean or additive mask -> [B, t, H, Dh]."""
    mask = open_empty_rows(mask)
    if mask.dtype != torch.bool:
        mask = mask.to(query.dtype)  # log I is float32 (0 / -inf when hard: exact in any dtype); SDPA takes the query's
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling,
                                         enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous()


def open_empty_rows(mask: torch.Tensor) -> torch.Tensor:
    """A query that may attend to nothing (a padding token) would give NaN, which would then reach real tokens through
    its keys and values (0 * NaN); let it attend to everything instead: its output is never read."""
    # no early return on "every row sees something": that test would wait for the device at every layer
    if mask.dtype == torch.bool:
        return mask | ~mask.any(-1, keepdim=True)
    return mask.masked_fill(~(mask > -math.inf).any(-1, keepdim=True), 0.0)


def always_materialised_mask(*args, **kwargs):
    """SDPA's boolean mask without the is_causal shortcut (None): the attention function adds log I to it."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)
