"""EViT-style token pruning (Liang et al. 2022) between the layers of transformers' ViT / DeiT, by forward hooks.

``set_token_pruning(model, token_keep=0.7, prune_layers=(1,))`` on a model prepared by
``bab.sparsifiner.attach.attach`` (with predictors, or ``predictor_config=None`` for EViT alone) registers a
forward hook on every layer; after the layers in ``prune_layers`` (0-based) the hook replaces the layer's output
[B, n, D] by [B, n', D]: the leading special tokens (CLS; CLS and distillation for DeiT), then the
ceil(token_keep * m) of the m other tokens that the CLS query attended to most in that layer (attention averaged
over heads, kept in sequence order), then, with ``fuse=True`` (EViT's default), one fused token: the sum of the
dropped tokens weighted by their CLS attention, as EViT's ``extra_token`` (not renormalised). transformers' layer
loop passes the shorter sequence on, and the attention takes whatever length it gets.

Where this differs from EViT: EViT prunes inside the block, between the attention and the MLP; a hook can only
act on a layer's output, so here the tokens are pruned after the layer's MLP. ``fuse=False`` drops them
without a fused token: notebook 05's rule, the simpler variant (docs/sparsifiner.md).

The predictor of every later layer reads the original position of each surviving token (its W_down and W_up
columns; ``SparsifinerState.positions``). A fused token has no position of its own; it takes the position of the
dropped token with the largest weight in it (the one it mostly is), and ``SparsifinerState.fused`` marks it, so a
token-distillation loss can leave it out.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bab.core.budget import validate_fraction
from bab.sparsifiner.attach import STATE_ATTRIBUTE, _base, _LayerHandle, sparsifiner_state

__all__ = ["kept_tokens", "prune_and_fuse", "set_token_pruning", "validate_token_keep"]


def validate_token_keep(token_keep) -> float:
    return validate_fraction(token_keep, "token_keep", "the fraction of patch tokens kept at each pruning layer",
                             "use 1.0 to keep every token and e.g. 0.7 to keep 70% (CLS is always kept)")


def kept_tokens(token_keep: float, num_tokens: int) -> int:
    """How many of ``num_tokens`` prunable tokens are kept: ceil(token_keep * num_tokens), at least 1 (bab's
    ViT's rule; rounded first so 0.3 * 10 is 3)."""
    return max(1, math.ceil(round(validate_token_keep(token_keep) * num_tokens, 9)))


def prune_and_fuse(x: torch.Tensor, cls_attention: torch.Tensor, token_keep: float, num_special: int = 1,
                   fuse: bool = True, positions: torch.Tensor | None = None,
                   fused: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, n, D] whose first ``num_special`` tokens are never pruned, cls_attention [B, H, n] (the CLS row of
    this layer's attention), ``positions`` [B, n] the tokens' original positions and ``fused`` bool [B, n] which
    are fused tokens (defaults: 0..n-1 and none).

    Returns (x [B, n', D], positions [B, n'], fused [B, n']) with n' = num_special + kept (+ 1 fused token when
    ``fuse`` and a token was dropped). Nothing dropped (token_keep 1): x unchanged.
    """
    B, n, D = x.shape
    if positions is None:
        positions = torch.arange(n, device=x.device).expand(B, n)
    if fused is None:
        fused = torch.zeros(B, n, dtype=torch.bool, device=x.device)
    num_others = n - num_special
    kept = kept_tokens(token_keep, num_others)
    score = cls_attention.mean(1)[:, num_special:]  # [B, m]: CLS's attention to each prunable token, head mean
    top = torch.topk(score, kept, dim=-1).indices  # [B, kept]
    index = top.sort(dim=-1).values + num_special  # sequence order, as bab's ViT keeps them

    def take(t: torch.Tensor, i: torch.Tensor) -> torch.Tensor:  # t [B, n, ...] at i [B, r]
        return torch.gather(t, 1, i.view(*i.shape, *([1] * (t.dim() - 2))).expand(*i.shape, *t.shape[2:]))

    parts = [[t[:, :num_special], take(t, index)] for t in (x, positions, fused)]
    dropped = num_others - kept
    if fuse and dropped > 0:
        is_kept = torch.zeros_like(score, dtype=torch.bool).scatter_(1, top, True)
        # a stable sort of the flags puts the dropped tokens (False) first, in sequence order
        others = torch.sort(is_kept.to(torch.int8), dim=-1, stable=True).indices[:, :dropped]  # [B, dropped]
        weights = torch.gather(score, 1, others)  # [B, dropped]
        extra = (take(x, others + num_special) * weights.unsqueeze(-1)).sum(1, keepdim=True)  # [B, 1, D]
        heaviest = torch.gather(others, 1, weights.argmax(-1, keepdim=True)) + num_special  # [B, 1]
        parts[0].append(extra)
        parts[1].append(torch.gather(positions, 1, heaviest))
        parts[2].append(torch.ones(B, 1, dtype=torch.bool, device=x.device))
    x, positions, fused = (torch.cat(p, dim=1) for p in parts)
    return x, positions, fused


def set_token_pruning(model: nn.Module, token_keep: float | None, prune_layers=(), fuse: bool = True) -> None:
    """Prune tokens after the layers ``prune_layers`` (0-based) in the next forwards, keeping ``token_keep`` of the
    prunable tokens each time; ``token_keep=None`` turns pruning off. ``fuse``: add EViT's fused token."""
    state = sparsifiner_state(model)
    layers = _base(model).layers
    if token_keep is None:
        state.token_keep, state.prune_layers = None, ()
        return
    token_keep = validate_token_keep(token_keep)
    prune_layers = tuple(prune_layers)
    if not prune_layers or not all(isinstance(i, int) and not isinstance(i, bool) for i in prune_layers):
        raise TypeError(f"prune_layers must be a non-empty tuple of layer indices (0-based ints), got {prune_layers!r}")
    bad = [i for i in prune_layers if not 0 <= i < len(layers)]
    if bad or len(set(prune_layers)) != len(prune_layers):
        raise ValueError(f"prune_layers must be distinct indices in 0..{len(layers) - 1}, got {prune_layers}")
    if not isinstance(fuse, bool):
        raise TypeError(f"fuse must be True or False, got {fuse!r}")
    if state.core in ("fused", "linformer"):
        raise ValueError(f"token pruning needs each pruning layer's CLS attention row, which core={state.core!r} "
                         "never forms: configure(model, core='masked' or 'sparse' or 'dense') first")
    if not state.token_hooks:
        for i, layer in enumerate(layers):
            # the hook reads its layer's handle from the module (not a closure), so a deepcopy keeps its own state
            object.__setattr__(layer, STATE_ATTRIBUTE, _LayerHandle(state, i))
            layer.register_forward_hook(_prune_after_layer)
        state.token_hooks = True
    state.token_keep, state.prune_layers, state.fuse_tokens = token_keep, prune_layers, fuse


def _prune_after_layer(module: nn.Module, args: tuple, output):
    """Forward hook of a layer: its output hidden states [B, n, D], pruned where the state prunes after it."""
    handle = getattr(module, STATE_ATTRIBUTE)
    state, layer = handle.state, handle.layer
    if not state.prunes_after(layer):
        return None
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"token pruning expects a layer to return its hidden states [B, n, D], got "
                        f"{type(output).__name__}")
    x, state.positions, state.fused = prune_and_fuse(output, state.layers[layer]["cls_probs"], state.token_keep,
                                                     state.num_special, state.fuse_tokens, state.positions,
                                                     state.fused)
    return x
