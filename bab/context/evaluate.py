"""Perplexity and fraction of context pruned, with hard keep decisions (alpha = inf)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bab.context.interaction import HARD
from bab.context.lm import lm_forward
from bab.context.static_masks import pruned_fraction
from bab.core.outcomes import unit_ids
from bab.data.lm import lm_windows


@torch.no_grad()
def evaluate_lm(model, ids: torch.Tensor, context: int, budget: float | None = None, prune: bool = True,
                max_windows: int | None = None, batch_size: int = 16, attn_mask: torch.Tensor | None = None) -> dict:
    """Perplexity and fraction of context pruned (hard decisions, alpha = inf) on non-overlapping windows.

    fraction_pruned = 1 - mean over layers, windows and pairs k > j of I_kj: the share of
    (query, earlier token) pairs whose key/value the model no longer keeps.

    ``window_nll`` and ``window_tokens``: each window's summed cross-entropy (nats) and its token count, in window
    order, so a perplexity ratio of two models on the same windows can be bootstrapped over the windows
    (bab.core.outcomes; ``unit_ids`` fingerprint each window's tokens); perplexity = exp(sum(window_nll) /
    sum(window_tokens)) up to float rounding.

    ``attn_mask`` [context, context] bool: a static pattern (bab.context.static_masks) for the static
    baselines, with ``prune=False``; its fraction_pruned is the share of pairs k > j the mask hides.
    """
    if attn_mask is not None:
        if attn_mask.shape != (context, context):
            raise ValueError(f"attn_mask must be [context, context] = [{context}, {context}], "
                             f"got {tuple(attn_mask.shape)}")
    model.eval()
    x, y = lm_windows(ids, context, max_windows)
    nll, count, keep_sum = 0.0, 0, 0.0
    window_nll, window_tokens = [], []
    for i in range(0, len(x), batch_size):
        out = lm_forward(model, x[i: i + batch_size], alpha=HARD, budget=budget, prune=prune, attn_mask=attn_mask)
        logits = out.logits
        targets = y[i: i + batch_size]
        # cross_entropy is log_softmax then nll_loss: the same sum as before, bit for bit, and one log_softmax
        # gives each token's loss as well
        log_probs = F.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=1)
        nll += F.nll_loss(log_probs, targets.reshape(-1), reduction="sum").item()
        per_token = -log_probs.gather(1, targets.reshape(-1, 1)).view(targets.shape)
        window_nll += per_token.double().sum(dim=1).tolist()
        window_tokens += [targets.shape[1]] * len(targets)
        count += targets.numel()
        keep_sum += (out.keep_mass.item() if out.keep_mass is not None else 1.0) * len(logits)
    keep = keep_sum / len(x) if attn_mask is None else 1.0 - pruned_fraction(attn_mask)
    return {"perplexity": math.exp(nll / count), "val_ce": nll / count, "fraction_pruned": 1.0 - keep,
            "windows": len(x), "context": context, "window_nll": window_nll, "window_tokens": window_tokens,
            "unit_ids": unit_ids(torch.cat([x, y[:, -1:]], dim=1)).tolist()}
