"""A transformers ``Cache`` that evicts tokens by a training-free policy (bab.context.eviction), in any decoder.

    enable_eviction(model)                      # once: the "bab_eviction" attention and a pre-hook per layer
    model.generate(ids, past_key_values=EvictingCache(TOVA(budget=64)), ...)

Each call of a layer (the prompt, a chunk, or one token) goes:

1. the pre-hook hands the call's ``EvictingLayer`` to the attention module (the attention function is not given
   the cache by transformers' attention modules, so the hook carries it, as bab.context.attach does);
2. the attention module calls ``update(k, v)``: the layer appends the new tokens to the slots it holds and returns
   them all;
3. the "bab_eviction" attention function attends with transformers' mask (causal and padding, built over every
   token seen) gathered at the positions the slots hold (per key/value head when the policy keeps a set per head),
   so the new queries see the kept tokens and the call's own tokens causally; it computes the attention weights too
   when the policy reads them;
4. the layer asks the policy what to keep and gathers out the rest: the buffers then hold only the kept tokens, and
   the evicted ones' memory is released.

So a multi-token call (the prompt) attends in full and is compressed after it; one token at a time, every query
sees exactly the tokens its predecessors kept.

Positions, as ``PrunedCache`` (bab.context.pruned_cache): ``get_seq_length`` is the number of tokens *seen*, and
``get_mask_sizes`` sizes the mask over them, so position ids (learned positions, RoPE) stay those of the full
sequence. Rows of a batch keep their slots at the front of buffers sized to the longest row (``valid`` marks the
padding slots); batch padding is never kept and never counts towards a budget.

The cache also counts, over the real queries of every call, the earlier tokens each query saw against the earlier
tokens it would have seen without eviction: ``fraction_kept`` is the share of (query, earlier token) pairs kept,
the quantity ``bab.context.evaluate.evaluate_lm`` reports as 1 - fraction_pruned for learned pruning.

Shapes: B batch, H query heads, G key/value heads, S held slots, T new tokens, K = S + T, Dh head width; N the
heads that hold sets of their own: G for a per-head policy (``EvictionPolicy.per_head``), else 1 (the layer's set,
broadcast over its heads).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from bab.context.attach import is_attached
from bab.context.attention_arguments import decoder_attentions
from bab.context.eviction import EvictionPolicy, SlotView
from bab.context.masking import allowed_mask, always_materialised_mask, attend, open_empty_rows
from bab.context.pruned_cache import RowMappedCache, RowMappedLayer
from bab.core.outcomes import unit_ids
from bab.data.lm import lm_windows

__all__ = ["ATTN_IMPLEMENTATION", "EvictingCache", "EvictingLayer", "enable_eviction", "evaluate_eviction", "evicting"]

ATTN_IMPLEMENTATION = "bab_eviction"
HOOKED = "bab_eviction_hooked"  # marks an attention module that has the pre-hook
PENDING = "bab_eviction_layer"  # the EvictingLayer of the call, between the pre-hook and the attention function


class EvictingLayer(RowMappedLayer):
    """One layer: keys / values [B, G, S, Dh], positions [B, N, S] (-1: padding slot), valid [B, N, S], and with a
    policy that accumulates attention (H2O), mass [B, N, S] (attention each slot received so far, mean over heads).
    Every head holds as many tokens as the others (a policy keeps the same count per row in each)."""

    BUFFERS = ("keys", "values", "positions", "valid", "mass")
    PER_ROW = ("real_seen",)
    NAME, GONE = "an EvictingCache", "evicted"

    def __init__(self, policy: EvictionPolicy | None = None, **kwargs):
        super().__init__()
        self.policy = policy
        self.positions: torch.Tensor | None = None
        self.valid: torch.Tensor | None = None
        self.mass: torch.Tensor | None = None
        self.real_seen: torch.Tensor | None = None  # [B] real tokens given, kept or not
        self.seen = 0  # tokens given, padding included: the next token's position
        self.new = 0  # tokens the last update appended, not yet decided on
        self.armed = False  # set by the pre-hook: the attention function will run after this update
        self.visible_pairs = 0  # summed over real queries: earlier tokens seen ...
        self.full_pairs = 0  # ... and earlier tokens there were

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        B, G = key_states.shape[:2]
        sets = G if self.policy.per_head else 1
        self.positions = torch.zeros(B, sets, 0, dtype=torch.long, device=self.device)
        self.valid = torch.zeros(B, sets, 0, dtype=torch.bool, device=self.device)
        self.real_seen = torch.zeros(B, dtype=torch.long, device=self.device)
        if self.policy.accumulates_attention:
            self.mass = torch.zeros(B, sets, 0, dtype=torch.float32, device=self.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states [B, G, T, Dh] of T new tokens -> keys, values [B, G, S + T, Dh] to attend to."""
        if not self.armed:
            raise RuntimeError("this model's attention cannot evict: call bab.context.evicting_cache."
                               "enable_eviction(model) before running it with an EvictingCache")
        self.armed = False
        if self.new:  # the last call's tokens were never judged: its attention bypassed the "bab_eviction" function
            raise RuntimeError("the model attended without the 'bab_eviction' attention function (an attention path "
                               "of its own, e.g. GPT-2's reorder_and_upcast_attn), so nothing was evicted")
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        B, T, device = key_states.shape[0], key_states.shape[2], key_states.device
        self.keys = torch.cat([self.keys, key_states], dim=2)
        self.values = torch.cat([self.values, value_states], dim=2)
        sets = self.positions.shape[1]
        new_positions = torch.arange(self.seen, self.seen + T, device=device).expand(B, sets, T)
        self.positions = torch.cat([self.positions, new_positions], dim=2)
        self.valid = torch.cat([self.valid, torch.ones(B, sets, T, dtype=torch.bool, device=device)], dim=2)
        if self.mass is not None:
            self.mass = torch.cat([self.mass, self.mass.new_zeros(B, sets, T)], dim=2)
        self.seen += T
        self.new = T
        return self.keys, self.values

    def evict(self, visible: torch.Tensor, real_queries: torch.Tensor, weights: torch.Tensor | None) -> None:
        """After the call's attention: visible [B, N, T, K] (what each query saw), real_queries [B, T] (not padding),
        weights [B, H, T, K] (None unless the policy reads attention). Keeps what the policy keeps."""
        K = self.positions.shape[2]
        is_new = torch.arange(K, device=visible.device) >= K - self.new
        # a new token is real when some query may see it (itself at least); padding is seen by none
        real = self.valid & (~is_new | visible.any(dim=2))  # [B, N, K]
        self.real_seen = self.real_seen + (real[:, 0] & is_new).sum(dim=1)
        self.new = 0
        if self.mass is not None:
            # padding queries attend to everything (their rows are opened to avoid NaN): their weights do not count
            taken = weights.float() * real_queries[:, None, :, None]
            self.mass = self.mass + taken.mean(dim=1).sum(dim=1)[:, None, :]
        if self.policy.per_head:
            view = SlotView(positions=self.positions, real=real, seen=self.real_seen, weights=weights, mass=self.mass)
            self._keep(self.policy.keep(view))
        else:  # one set for the layer: the policy sees [B, K]
            mass = None if self.mass is None else self.mass[:, 0]
            view = SlotView(positions=self.positions[:, 0], real=real[:, 0], seen=self.real_seen, weights=weights,
                            mass=mass)
            self._keep(self.policy.keep(view)[:, None, :])

    def _keep(self, alive: torch.Tensor) -> None:
        """Store only the alive slots [B, N, K], in order, at the front of new buffers sized to the longest row."""
        counts = alive.sum(dim=2)  # [B, N]
        if bool(alive.all()):
            self.valid = alive
            return
        kept = int(counts.max())
        # a stable sort puts each row's alive slots first, in position order; slots past a row's count are padding
        order = torch.argsort((~alive).to(torch.uint8), dim=2, stable=True)[:, :, :kept]  # [B, N, S']
        self.valid = torch.arange(kept, device=alive.device) < counts[:, :, None]

        def gather_slots(t):  # [B, G, K, Dh] -> [B, G, S', Dh] (a layer's set, N = 1, broadcasts over the heads)
            return t.gather(2, order[:, :, :, None].expand(-1, t.shape[1], -1, t.shape[3]))

        self.keys, self.values = gather_slots(self.keys), gather_slots(self.values)
        self.positions = self.positions.gather(2, order).masked_fill(~self.valid, -1)
        if self.mass is not None:
            self.mass = self.mass.gather(2, order).masked_fill(~self.valid, 0.0)

    def count_pairs(self, visible: torch.Tensor, full: torch.Tensor, real_queries: torch.Tensor) -> None:
        """visible [B, N, T, K] and full [B, T, seen]: what each query sees with and without eviction, counted over
        the N sets (each head group's queries alike)."""
        earlier_visible = (visible.sum(dim=-1) - 1).clamp_min(0) * real_queries[:, None, :]
        earlier_full = (full.sum(dim=-1) - 1).clamp_min(0) * real_queries
        self.visible_pairs += int(earlier_visible.sum())
        self.full_pairs += int(earlier_full.sum()) * visible.shape[1]

    def live_tokens(self) -> torch.Tensor:
        """[B] tokens each row holds (in each head: heads hold equally many)."""
        return self.valid.sum(dim=2).amax(dim=1)

    def reset(self) -> None:
        self.__init__(self.policy)


class EvictingCache(RowMappedCache):
    """Per-layer ``EvictingLayer`` caches sharing one policy. A cache is for one sequence batch: make a new one per
    generate call."""

    def __init__(self, policy: EvictionPolicy):
        if not isinstance(policy, EvictionPolicy):
            raise TypeError(f"EvictingCache needs an EvictionPolicy (bab.context.eviction), "
                            f"got {type(policy).__name__}")
        super().__init__(layer_class_to_replicate=EvictingLayer)  # the pre-hook adds the layers, with the policy
        self.policy = policy

    def new_layer(self) -> EvictingLayer:
        return EvictingLayer(self.policy)

    def fraction_kept(self) -> float:
        """Share of (real query, earlier token) pairs whose key and value the queries still saw, over all layers and
        calls so far (1.0 before any token has an earlier one)."""
        full = sum(layer.full_pairs for layer in self.layers)
        return sum(layer.visible_pairs for layer in self.layers) / full if full else 1.0


# ---------------------------------------------------------------------- the model side


def enable_eviction(model: nn.Module) -> nn.Module:
    """Route every decoder layer's attention of ``model`` (a transformers causal LM: GPT-2, Llama, Qwen2, Mistral)
    through "bab_eviction", so it runs with an ``EvictingCache``. Without one (no cache, a DynamicCache) the model
    computes what it computed before (SDPA). Idempotent; returns the same model."""
    if is_attached(model):
        raise ValueError("this model has learned context pruning attached (bab.context.attach): evaluate eviction "
                         "policies on the plain model, or use its PrunedCache")
    for attention in decoder_attentions(model):
        if not getattr(attention, HOOKED, False):
            attention.register_forward_pre_hook(_hand_over_layer, with_kwargs=True)
            object.__setattr__(attention, HOOKED, True)
    AttentionInterface.register(ATTN_IMPLEMENTATION, eviction_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, always_materialised_mask)
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        raise RuntimeError(f"{type(model).__name__} refused the attention implementation {ATTN_IMPLEMENTATION!r}")
    return model


@contextmanager
def evicting(model: nn.Module):
    """``enable_eviction`` for the block, and the model's own attention implementation back afterwards (its plain
    forward then runs the kernel it ran before, e.g. SDPA's fused causal path)."""
    before = model.config._attn_implementation
    enable_eviction(model)
    try:
        yield model
    finally:
        if before != ATTN_IMPLEMENTATION:
            model.set_attn_implementation(before)


def _hand_over_layer(module: nn.Module, args: tuple, kwargs: dict):
    cache = kwargs.get("past_key_values")
    layer = None
    if isinstance(cache, EvictingCache):
        layer = cache._layer(module.layer_idx)
        layer.armed = True
    object.__setattr__(module, PENDING, layer)


def eviction_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       **kwargs) -> tuple[torch.Tensor, None]:
    """The "bab_eviction" attention: query [B, H, T, Dh], key/value [B, G, K, Dh] -> output [B, T, H, Dh]."""
    layer: EvictingLayer | None = getattr(module, PENDING, None)
    object.__setattr__(module, PENDING, None)
    T = query.shape[2]
    if layer is None:  # no EvictingCache in this call: plain attention
        return attend(query, key, value, allowed_mask(attention_mask, T, key.shape[2], query.device), dropout,
                      scaling), None
    positions = layer.positions  # [B, N, K]
    B, sets = positions.shape[:2]
    full = allowed_mask(attention_mask, T, layer.seen, query.device).expand(B, 1, T, -1)  # [B, 1, T, seen]
    visible = full.expand(-1, sets, -1, -1).gather(3, positions.clamp_min(0)[:, :, None, :].expand(-1, -1, T, -1))
    visible = visible & layer.valid[:, :, None, :]  # [B, N, T, K]
    real_queries = full.any(dim=-1)[:, 0]  # [B, T]: a padding query may see nothing
    layer.count_pairs(visible, full[:, 0], real_queries)
    mask = open_empty_rows(visible)
    if sets > 1 and sets != query.shape[1]:  # query head h reads key/value head h // (H / G), as repeat_kv
        mask = mask.repeat_interleave(query.shape[1] // sets, dim=1)  # [B, H, T, K]
    weights = None
    if layer.policy.needs_attention:
        out, weights = _attention_with_weights(query, key, value, mask, scaling, dropout, module.training)
    else:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling,
                                             enable_gqa=query.shape[1] != key.shape[1])
    layer.evict(visible, real_queries, weights)
    return out.transpose(1, 2).contiguous(), None


def _attention_with_weights(query, key, value, mask, scaling, dropout, training):
    """Eager attention: -> output [B, H, T, Dh] and probabilities [B, H, T, K] (before dropout)."""
    heads, groups = query.shape[1], key.shape[1]
    if heads != groups:  # query head h reads key/value head h // (H / G), as transformers' repeat_kv
        key, value = key.repeat_interleave(heads // groups, dim=1), value.repeat_interleave(heads // groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    logits = (query @ key.transpose(-1, -2)) * scale
    probs = torch.softmax(logits.float().masked_fill(~mask, -math.inf), dim=-1).to(query.dtype)
    out = F.dropout(probs, p=dropout, training=training) @ value
    return out, probs


# ---------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate_eviction(model, ids: torch.Tensor, context: int, policy: EvictionPolicy, max_windows: int | None = None,
                      batch_size: int = 16, chunk: int = 1, prefill: int = 0) -> dict:
    """Perplexity and fraction of context pruned of a transformers causal LM evicting by ``policy``.

    The same non-overlapping windows as ``bab.context.evaluate.evaluate_lm`` and the same keys (perplexity, val_ce,
    fraction_pruned, windows, context, window_nll, window_tokens, unit_ids), so rows compare window by window. Each
    window goes through a fresh EvictingCache ``chunk`` tokens per call (1: token by token, every query sees what its
    predecessors kept; a larger chunk attends in full within the chunk, faster, and keeps more). ``prefill`` > 0:
    the window's first ``prefill`` tokens go in one call first, as a prompt does in ``generate`` (their own losses
    are then those of full attention); SnapKV, which compresses prompts only, needs it to evict anything.

    fraction_pruned = 1 - the share of (query, earlier token) pairs whose key/value the query still saw, over layers,
    windows and queries: the pairs k > j that ``evaluate_lm`` counts for learned pruning.

    The model's attention implementation is "bab_eviction" during the call and restored after it.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    if isinstance(prefill, bool) or not isinstance(prefill, int) or not 0 <= prefill <= context:
        raise ValueError(f"prefill must be an int in [0, context = {context}], got {prefill!r}")
    calls = ([(0, prefill)] if prefill else []) + [(s, min(s + chunk, context)) for s in range(prefill, context, chunk)]
    model.eval()
    x, y = lm_windows(ids, context, max_windows)
    nll, count, visible, full = 0.0, 0, 0, 0
    window_nll, window_tokens = [], []
    with evicting(model):
        for i in range(0, len(x), batch_size):
            inputs, targets = x[i: i + batch_size], y[i: i + batch_size]
            cache = EvictingCache(policy)
            logits = torch.cat([model(inputs[:, start:end], past_key_values=cache, use_cache=True).logits
                                for start, end in calls], dim=1)
            log_probs = F.log_softmax(logits.float().reshape(-1, logits.shape[-1]), dim=1)
            per_token = -log_probs.gather(1, targets.reshape(-1, 1)).view(targets.shape)
            window = per_token.double().sum(dim=1)
            nll += window.sum().item()
            window_nll += window.tolist()
            window_tokens += [targets.shape[1]] * len(targets)
            count += targets.numel()
            visible += sum(layer.visible_pairs for layer in cache.layers)
            full += sum(layer.full_pairs for layer in cache.layers)
    return {"perplexity": math.exp(nll / count), "val_ce": nll / count,
            "fraction_pruned": 1.0 - (visible / full if full else 1.0), "windows": len(x), "context": context,
            "window_nll": window_nll, "window_tokens": window_tokens, "policy": policy.describe(),
            "unit_ids": unit_ids(torch.cat([x, y[:, -1:]], dim=1)).tolist()}
