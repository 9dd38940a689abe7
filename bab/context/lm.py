"""What training, evaluation and scoring ask of a transformers causal LM, with or without context pruning attached.

The models are transformers' own (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ...); context
pruning is attached to them by ``bab.context.attach.attach``. These functions run one forward under given settings
(alpha, budget, pruning on or off, a static mask) and return what the callers read: the logits with the keep mass
and the sparsity term (``LMOutput``), the last hidden states before the output projection, or those of several
continuations of one shared prefix run once (through a cache). A model without pruning attached is the plain
decoder: its pruning is off.

Shapes: B batch, T tokens, d width, V vocabulary, L layers.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn
from transformers import DynamicCache

from bab.context.attach import context_state, interactions, is_attached
from bab.context.evicting_cache import EvictingCache, evicting
from bab.context.eviction import EvictionPolicy
from bab.context.interaction import HARD, validate_alpha
from bab.context.pruned_cache import PrunedCache

__all__ = ["LMOutput", "check_length", "continuation_hidden_states", "hidden_states", "kv_shape", "lm_forward",
           "max_positions", "output_head", "prunes", "pruning_parameters", "settings"]


@dataclass
class LMOutput:
    logits: torch.Tensor  # [B, T, V]
    keep_mass: torch.Tensor | None = None  # mean over layers of the mean own I over pairs k > j (pruning only)
    # the sparsity regulariser under the normalisation asked for (bab.context.interaction.sparsity_term), mean over
    # layers; keep_mass itself under "causal_pairs"
    sparsity: torch.Tensor | None = None
    log_keep: list[torch.Tensor] = field(default_factory=list)  # per layer the effective log I [B, T, T], if asked


def prunes(model: nn.Module) -> bool:
    """Whether ``model`` has context pruning attached."""
    return is_attached(model)


def max_positions(model: nn.Module) -> int:
    """The longest sequence the model's positions allow (GPT-2's learned positions; RoPE models' trained length)."""
    config = model.config
    for name in ("n_positions", "max_position_embeddings"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    return math.inf


def check_length(model: nn.Module, length: int) -> None:
    if length > max_positions(model):
        raise ValueError(f"sequence of {length} tokens is longer than the model's maximum context "
                         f"{max_positions(model)}; shorten the input or the generation")


def pruning_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every interaction module (empty for a plain decoder)."""
    return [(name, p) for name, p in model.named_parameters() if ".interaction." in name]


def kv_shape(model: nn.Module) -> tuple[int, int]:
    """(key/value heads G, head width Dh) of each layer's cache."""
    c = model.config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return getattr(c, "num_key_value_heads", None) or heads, head_dim


def output_head(model: nn.Module) -> nn.Module:
    """The output projection: last hidden states [..., d] -> logits [..., V]."""
    return model.get_output_embeddings()


@contextmanager
def settings(model: nn.Module, alpha: float = HARD, budget: float | None = None, prune: bool = True):
    """Run the block with the attached pruning at ``alpha`` and ``budget``, on or off (``prune``); yields whether it
    prunes (False for a plain decoder). The model's own settings come back afterwards."""
    if not prunes(model):
        yield False
        return
    state = context_state(model)
    saved = (state.alpha, state.budget, state.prune)
    state.alpha, state.prune = validate_alpha(alpha), bool(prune)
    if prune:
        state.budget = budget
        if state.pruning.budget_conditioned != (budget is not None):
            interactions(model)[0].bias_for(budget)  # raises the error that says what to pass
        if budget is not None and not 0 < budget <= 1:
            raise ValueError(f"budget must lie in (0, 1], got {budget}")
    try:
        yield bool(prune)
    finally:
        state.alpha, state.budget, state.prune = saved


def _unwrapped(model: nn.Module) -> nn.Module:
    """The transformers model inside a (Distributed)DataParallel wrapper, as the training loop hands it over under
    ``accelerate launch`` (the wrapper has neither the config nor the attached state)."""
    return extract_model_from_parallel(model, keep_fp32_wrapper=False)


def _check_ids(model: nn.Module, input_ids: torch.Tensor) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, time], got shape {tuple(input_ids.shape)}")
    check_length(model, input_ids.shape[1])


def static_attention_mask(attn_mask: torch.Tensor, batch: int) -> torch.Tensor:
    """A static pattern [T, T] or [B, T, T] bool (True: may attend) AND-ed with causality -> [B, 1, T, T], the 4-D
    mask transformers passes to the attention as it is."""
    T = attn_mask.shape[-1]
    if attn_mask.dtype != torch.bool or attn_mask.shape[-2:] != (T, T) or attn_mask.dim() not in (2, 3):
        raise ValueError(f"attn_mask must be a bool tensor [T, T] or [B, T, T], got {attn_mask.dtype} "
                         f"{tuple(attn_mask.shape)}; build one with bab.context.static_masks")
    causal = torch.ones(T, T, dtype=torch.bool, device=attn_mask.device).tril()
    mask = attn_mask & causal
    return (mask if mask.dim() == 3 else mask.expand(batch, T, T))[:, None]


def lm_forward(model: nn.Module, input_ids: torch.Tensor, alpha: float = HARD, budget: float | None = None,
               prune: bool = True, attn_mask: torch.Tensor | None = None, sparsity_normalisation: str = "causal_pairs",
               return_log_keep: bool = False) -> LMOutput:
    """input_ids [B, T] -> ``LMOutput``: logits [B, T, V], and with pruning on the keep mass, the sparsity term
    (with gradient) and, if asked, each layer's effective log I.

    ``prune=False`` runs the plain decoder. ``attn_mask`` [T, T] or [B, T, T] bool: a static pattern (True: may
    attend) AND-ed with the causal mask, for the static baselines (with pruning off). ``model`` may be wrapped in
    DistributedDataParallel (the forward then runs through the wrapper, so gradients are synchronised).
    """
    inner = _unwrapped(model)
    _check_ids(inner, input_ids)
    mask = None
    if attn_mask is not None:
        if prune and prunes(inner):
            raise ValueError("a static attn_mask is a baseline of its own: run it with prune=False (or on a model "
                             "without context pruning), not on top of learned pruning")
        mask = static_attention_mask(attn_mask, input_ids.shape[0])
    with settings(inner, alpha, budget, prune) as pruning:
        logits = model(input_ids, attention_mask=mask, use_cache=False).logits
        if not pruning:
            return LMOutput(logits=logits)
        state = context_state(inner)
        mass = state.keep_mass()
        sparsity = mass if sparsity_normalisation == "causal_pairs" else state.sparsity(sparsity_normalisation)
        log_keep = [e.detach() for e in state.effective] if return_log_keep else []
        return LMOutput(logits=logits, keep_mass=mass, sparsity=sparsity, log_keep=log_keep)


def hidden_states(model: nn.Module, input_ids: torch.Tensor, budget: float | None = None,
                  prune: bool = True) -> torch.Tensor:
    """input_ids [B, T] -> the last hidden states [B, T, d] (after the final norm, before the output projection),
    hard decisions: for a caller that needs the logits at a few positions only (``output_head(model)(h[rows,
    positions])``; the projection over the vocabulary is a fifth of SmolLM2's compute per token)."""
    _check_ids(model, input_ids)
    with settings(model, HARD, budget, prune):
        return model.base_model(input_ids, use_cache=False).last_hidden_state


@torch.no_grad()
def continuation_hidden_states(model: nn.Module, prefix_ids: torch.Tensor, continuation_ids: torch.Tensor,
                               budget: float | None = None, prune: bool = True,
                               policy: EvictionPolicy | None = None) -> torch.Tensor:
    """One prefix [1, C] and n continuations of it [n, L] (right-padded) -> the last hidden states [n, 1 + L, d] at
    positions C - 1 .. C + L - 1, hard decisions: what ``hidden_states`` of each prefix + continuation gives there,
    the prefix run once into a cache (a ``PrunedCache`` with pruning on) that every continuation then reads. Row i's
    state j predicts its continuation's token j. For the choices of a zero-shot item, which share their context.

    ``policy``: a training-free eviction policy (bab.context.eviction) on a plain decoder instead: the prefix runs in
    one call (full attention), the policy then evicts from its cache, and the continuations read what it kept."""
    if prefix_ids.dim() != 2 or prefix_ids.shape[0] != 1 or continuation_ids.dim() != 2:
        raise ValueError(f"prefix_ids must be [1, C] and continuation_ids [n, L], got shapes "
                         f"{tuple(prefix_ids.shape)} and {tuple(continuation_ids.shape)}")
    check_length(model, prefix_ids.shape[1] + continuation_ids.shape[1])
    if policy is not None:
        with evicting(model):
            return _continue(model, prefix_ids, continuation_ids, EvictingCache(policy))
    with settings(model, HARD, budget, prune) as pruning:
        if pruning and not context_state(model).pruning.irreversible:
            raise ValueError("continuation_hidden_states follows irreversible drops; this model was attached with "
                             "PruningConfig(irreversible=False): run hidden_states on each full sequence instead")
        return _continue(model, prefix_ids, continuation_ids, PrunedCache() if pruning else DynamicCache())


def _continue(model: nn.Module, prefix_ids: torch.Tensor, continuation_ids: torch.Tensor, cache) -> torch.Tensor:
    """The prefix [1, C] into ``cache``, the cache copied for each continuation [n, L], the continuations after it."""
    h = model.base_model(prefix_ids, past_key_values=cache, use_cache=True).last_hidden_state  # [1, C, d]
    n = continuation_ids.shape[0]
    cache.batch_repeat_interleave(n)
    x = model.base_model(continuation_ids, past_key_values=cache, use_cache=True).last_hidden_state  # [n, L, d]
    return torch.cat([h[:, -1:].expand(n, -1, -1), x], dim=1)
