"""What every decoder with dynamic context pruning shares: the pruned attention, the layer loop, the cache.

``bab.context.gpt2`` (GPT-2) and ``bab.context.llama`` (Llama family: RoPE, grouped-query attention,
RMSNorm, SwiGLU) differ only in their projections, norms, position encoding and feed-forward. The
parts that decide which tokens stay visible, fill and shrink the KV cache, and run the full-sequence
and the cached paths live here once:

- ``PrunedAttention``: the causal attention with the layer's ``ContextInteraction`` (log I added to
  the logits), an optional static mask (bab.context.static_masks) and the one-token cached step.
  Subclasses give ``qkv(x, start)`` and ``merge(y)``.
- ``DecoderBlock``: a pre-norm block, ``x + attn(norm(x))`` then ``x + ffn(x)``.
- ``ContextDecoder``: ``forward``, ``prefill``, ``decode_step``, ``new_cache``, ``token_drop_times``.

Grouped-query attention (H query heads, G <= H key/value heads): the interaction is per layer over
tokens and shared by all heads (as in the paper), so one [B, T, T] log I serves every query head, and
a dropped token leaves the cache of all G key/value heads at once. The cache stores G heads, not H.

Depth propagation (``PruningConfig.propagate_in_depth``, the official code's ``propagate_in_depth``):
layer l adds the mask it attended with to the next layer's, so the effective
log I_eff^l = log I^l + log I_eff^(l-1): a token dropped in one layer is dropped in every layer above.
The sparsity regulariser (``keep_mass``) stays on each layer's own I, as the official code's loss does.

Shapes: B batch, T sequence, d width, H query heads, G key/value heads, Dh head width, r interaction
width, V vocabulary, S cached slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from bab.context.interaction import HARD, drop_times, keep_mass, sparsity_term
from bab.context.kv_cache import KVCache, LayerKV


@dataclass
class LMOutput:
    logits: torch.Tensor  # [B, T, V]
    keep_mass: torch.Tensor | None = None  # mean over layers of the mean own I over pairs k > j (pruning only)
    # the sparsity regulariser under the normalisation forward() was asked for (bab.context.interaction.sparsity_term),
    # mean over layers; keep_mass itself under "causal_pairs"
    sparsity: torch.Tensor | None = None
    log_keep: list[torch.Tensor] = field(default_factory=list)  # per layer the effective log I [B, T, T], if asked


def causal_logits_mask(T: int, device, dtype, static: torch.Tensor | None = None) -> torch.Tensor:
    """Additive mask [T, T] (or [B, T, T] with a batched ``static``): 0 where k may attend j, -inf elsewhere.

    ``static`` [T, T] or [B, T, T] bool: True where a static pattern allows k to attend j (AND-ed with causal).
    """
    causal = torch.full((T, T), -math.inf, device=device, dtype=dtype).triu(1)
    if static is None:
        return causal
    if static.shape[-2:] != (T, T) or static.dtype != torch.bool:
        raise ValueError(f"attn_mask must be a bool tensor [T, T] or [B, T, T] with T={T}, "
                         f"got {static.dtype} {tuple(static.shape)}; build one with bab.context.static_masks")
    return causal.masked_fill(~static.to(device), -math.inf)


class PrunedAttention(nn.Module):
    """Causal self-attention with the layer's context interaction. Subclasses set ``n_head``, ``n_kv_head``,
    ``attn_dropout``, ``interaction`` (None: no pruning) and define ``qkv`` and ``merge``."""

    n_head: int
    n_kv_head: int
    attn_dropout: float
    interaction: nn.Module | None

    def qkv(self, x: torch.Tensor, start: int):
        """x [B, T, d] at positions start.. -> q [B, H, T, Dh], k, v [B, G, T, Dh] (positions encoded)."""
        raise NotImplementedError

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        """y [B, H, T, Dh] -> output projection [B, T, d]."""
        raise NotImplementedError

    def attend(self, q, k, v, mask=None, is_causal=False):
        dropout = self.attn_dropout if self.training else 0.0
        # grouped-query attention: SDPA shares each key/value head with H / G query heads
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout,
                                              enable_gqa=self.n_kv_head != self.n_head)

    def forward(self, x, alpha: float, budget: float | None, prune: bool, start: int = 0,
                inherited: torch.Tensor | None = None, static: torch.Tensor | None = None):
        """Full sequence x [B, T, d]. ``inherited``: the previous layer's effective log I (depth propagation).

        Returns (output [B, T, d], own log I [B, T, T] or None, effective log I or None, k, v, k_int [B, T, r]).
        """
        q, k, v = self.qkv(x, start)
        own = effective = k_int = None
        if prune and self.interaction is not None:
            own, k_int = self.interaction.log_keep(x, alpha, budget)
            effective = own if inherited is None else own + inherited
        if effective is None and static is None:
            return self.merge(self.attend(q, k, v, is_causal=True)), None, None, k, v, None
        mask = causal_logits_mask(x.shape[1], x.device, x.dtype, static)
        if effective is not None:
            mask = mask + effective
        mask = mask[:, None] if mask.dim() == 3 else mask  # [B, 1, T, T]: one mask for every head
        return self.merge(self.attend(q, k, v, mask)), own, effective, k, v, k_int

    def prefill_chunked(self, x, budget: float | None, inherited_first: torch.Tensor | None = None,
                        chunk: int = 256):
        """The hard pruned forward of a prompt x [B, T, d], in query chunks: what ``prefill`` runs.

        Equal to ``forward(x, HARD, ...)`` without its [B, T, T] float masks: with hard decisions token j is
        visible to k iff j <= k < first[j], where first[j] is the first query n > j with s_nj <= 0 (T if none).
        Each chunk of queries [c0, c1) scores its interaction pairs against keys [0, c1) only, updates
        ``first``, and attends to keys [0, c1) with a boolean mask (SDPA), so memory is O(B T chunk) and the
        attention skips the upper triangle beyond the chunk, as a causal kernel does.

        ``inherited_first`` [B, T] (depth propagation): the layer below's effective first drops; the effective
        first here is the minimum of both. Returns (output [B, T, d], effective first [B, T], k, v, k_int).
        """
        B, T, _ = x.shape
        q, k, v = self.qkv(x, 0)
        q_int, k_int = self.interaction.query(x), self.interaction.key(x)
        first = torch.full((B, T), T, dtype=torch.long, device=x.device)
        if inherited_first is not None:
            first = torch.minimum(first, inherited_first)
        outputs = [self._hard_chunk(q[:, :, c0:c0 + chunk], k, v, q_int[:, c0:c0 + chunk], k_int, first, c0, budget)
                   for c0 in range(0, T, chunk)]
        return self.merge(torch.cat(outputs, dim=2)), first, k, v, k_int

    def _hard_chunk(self, q, k, v, q_int, k_int, first, c0: int, budget: float | None) -> torch.Tensor:
        """Queries at positions c0..c1-1 (q [B, H, C, Dh], q_int [B, C, r]) with hard irreversible decisions,
        against the keys before c1 (k, v [B, G, >= c1, Dh], k_int [B, >= c1, r]): folds the chunk's drops into
        ``first`` [B, T] (in place; T: not dropped) and returns the attention output [B, H, C, Dh]."""
        c1, T = c0 + q.shape[2], first.shape[1]
        rows = torch.arange(c0, c1, device=q.device)[:, None]  # queries n (= k) of the chunk
        cols = torch.arange(c1, device=q.device)[None, :]  # keys j
        scores = self.interaction.scores(q_int, k_int[:, :c1], budget)  # [B, C, c1]
        dropped = (scores <= 0) & (cols < rows)  # n drops j (n > j only)
        # first n in the chunk that drops j (T when none), folded into the running first drop
        n_idx = torch.where(dropped, rows, torch.full_like(rows, T)).amin(dim=1)  # [B, c1]
        first[:, :c1] = torch.minimum(first[:, :c1], n_idx)
        visible = (cols <= rows) & (rows < first[:, None, :c1])  # [B, C, c1]
        return self.attend(q, k[:, :, :c1], v[:, :, :c1], visible[:, None])

    def continue_after(self, x, past: tuple, budget: float | None, inherited_first: torch.Tensor | None = None):
        """n continuations x [n, L, d] at positions C.. of one shared prefix of C tokens, whose layer state is
        ``past`` = (k, v [1, G, C, Dh], k_int [1, C, r] or None, first [1, C] or None) as ``prefill_chunked`` (or
        the dense forward: k_int and first None) left it. The same as the full forward of each prefix +
        continuation at the continuation's positions, with hard decisions: a continuation token may drop prefix
        tokens for the tokens after it, never for the prefix.

        ``inherited_first`` [n, C + L] (depth propagation): the layer below's effective first drops. Returns
        (output [n, L, d], effective first [n, C + L], or None when the prefix ran dense)."""
        k_past, v_past, k_int_past, first_past = past
        (n, L, _), C = x.shape, k_past.shape[2]
        T = C + L
        q, k, v = self.qkv(x, C)
        k = torch.cat([k_past.expand(n, -1, -1, -1), k], dim=2)  # [n, G, T, Dh]
        v = torch.cat([v_past.expand(n, -1, -1, -1), v], dim=2)
        if k_int_past is None:
            causal = torch.arange(T, device=x.device)[None, :] <= torch.arange(C, T, device=x.device)[:, None]
            return self.merge(self.attend(q, k, v, causal)), None
        k_int = torch.cat([k_int_past.expand(n, -1, -1), self.interaction.key(x)], dim=1)
        # the prefix's first drops, with "not dropped" (C) now T, then the continuation's tokens, none dropped yet
        first = torch.cat([first_past.masked_fill(first_past >= C, T).expand(n, -1),
                           torch.full((n, L), T, dtype=torch.long, device=x.device)], dim=1)
        if inherited_first is not None:
            first = torch.minimum(first, inherited_first)
        out = self._hard_chunk(q, k, v, self.interaction.query(x), k_int, first, C, budget)
        return self.merge(out), first

    def step(self, x, layer_cache: LayerKV, position: int, budget: float | None, prune: bool,
             inherited_alive: torch.Tensor | None = None) -> torch.Tensor:
        """One new token x [B, 1, d] against the cache: drop, append, attend. Returns [B, 1, d].

        ``inherited_alive`` [B, P] bool (depth propagation): which positions the layer below still holds;
        a token it dropped leaves this layer's cache too.
        """
        q, k, v = self.qkv(x, position)
        k_int = None
        if prune and self.interaction is not None:
            q_int, k_int = self.interaction.query(x), self.interaction.key(x)
            if layer_cache.length:
                _, _, cached_int, _ = layer_cache.view()
                # the new token decides which earlier tokens it drops; the drop is for good
                keep = self.interaction.step_keep(q_int, cached_int, budget)
                if inherited_alive is not None:
                    keep = keep & layer_cache.holds(inherited_alive)
                layer_cache.compact(keep)
        layer_cache.append(k, v, k_int, position)
        keys, values, _, valid = layer_cache.view()
        mask = None if layer_cache.all_valid() else valid[:, None, None, :]  # [B, 1, 1, S]
        return self.merge(self.attend(q, keys, values, mask))


class DecoderBlock(nn.Module):
    """A pre-norm decoder block; subclasses expose their attention (``attention``) and define the two halves."""

    @property
    def attention(self) -> PrunedAttention:
        raise NotImplementedError

    def attn_input(self, x: torch.Tensor) -> torch.Tensor:
        """The normed input of the attention (and of the interaction)."""
        raise NotImplementedError

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch after attention (norm + MLP), without the residual itself."""
        raise NotImplementedError


class ContextDecoder(nn.Module):
    """The layer loop of a decoder with optional dynamic context pruning.

    Subclasses set ``config`` (with ``.pruning``), define ``blocks`` (the DecoderBlocks), ``max_positions``,
    ``kv_shape`` (G, Dh), ``embed(ids, start)`` and ``head(h)`` (final norm + output projection).
    """

    config: object
    prefill_chunk: int = 256  # queries per chunk of the pruned prefill (memory O(B T chunk), not O(B T^2))

    @property
    def blocks(self) -> nn.ModuleList:
        raise NotImplementedError

    @property
    def max_positions(self) -> int:
        raise NotImplementedError

    @property
    def kv_shape(self) -> tuple[int, int]:
        raise NotImplementedError

    def embed(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        raise NotImplementedError

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., d] -> logits [..., V] (final norm and output projection)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    @property
    def prunes(self) -> bool:
        return self.config.pruning is not None

    @property
    def propagates(self) -> bool:
        return self.prunes and self.config.pruning.propagate_in_depth

    def pruning_parameters(self):
        """(name, parameter) of the interaction query/key/bias/sensitivity of every layer."""
        return [(n, p) for n, p in self.named_parameters() if ".interaction." in n]

    def check_length(self, length: int) -> None:
        if length > self.max_positions:
            raise ValueError(f"sequence of {length} tokens is longer than the model's maximum context "
                             f"{self.max_positions}; shorten the input or the generation")

    def _run(self, x, alpha, budget, prune, static=None, visit=None) -> torch.Tensor:
        """Every block on x [B, T, d] -> the last hidden states [B, T, d].

        ``visit(layer, own log I, effective log I, k, v, k_int)`` sees each layer's attention by-products.
        """
        inherited = None
        for i, block in enumerate(self.blocks):
            a, own, effective, k, v, k_int = block.attention(block.attn_input(x), alpha, budget, prune, 0,
                                                             inherited if self.propagates else None, static)
            x = x + a
            x = x + block.feed_forward(x)
            inherited = effective
            if visit is not None:
                visit(i, own, effective, k, v, k_int)
        return x

    def forward(self, input_ids: torch.Tensor, alpha: float = HARD, budget: float | None = None, prune: bool = True,
                return_log_keep: bool = False, attn_mask: torch.Tensor | None = None,
                sparsity_normalisation: str = "causal_pairs") -> LMOutput:
        """input_ids [B, T] -> logits [B, T, V].

        ``prune=False`` runs the plain decoder (the interactions unused). ``attn_mask`` [T, T] or [B, T, T] bool:
        a static pattern (True: may attend) AND-ed with the causal mask, for the static baselines.
        ``sparsity_normalisation``: how ``LMOutput.sparsity`` averages I (``bab.context.interaction.sparsity_term``).
        """
        self._check_ids(input_ids)
        masses, sparsities, log_keeps = [], [], []

        def record(_, own, effective, *__):
            if own is not None:
                masses.append(keep_mass(own))
                if sparsity_normalisation != "causal_pairs":
                    sparsities.append(sparsity_term(own, sparsity_normalisation))
                if return_log_keep:
                    log_keeps.append(effective.detach())

        h = self._run(self.embed(input_ids), alpha, budget, prune, attn_mask, record)
        mass = torch.stack(masses).mean() if masses else None
        sparsity = torch.stack(sparsities).mean() if sparsities else mass
        return LMOutput(logits=self.head(h), keep_mass=mass, sparsity=sparsity, log_keep=log_keeps)

    def hidden_states(self, input_ids: torch.Tensor, alpha: float = HARD, budget: float | None = None,
                      prune: bool = True) -> torch.Tensor:
        """input_ids [B, T] -> the last hidden states [B, T, d], before the head: for a caller that needs the
        logits at a few positions only (``head(h[rows, positions])``; the output projection over the whole
        vocabulary is a fifth of SmolLM2's compute per token)."""
        self._check_ids(input_ids)
        return self._run(self.embed(input_ids), alpha, budget, prune)

    @torch.no_grad()
    def continuation_hidden_states(self, prefix_ids: torch.Tensor, continuation_ids: torch.Tensor,
                                   budget: float | None = None, prune: bool = True) -> torch.Tensor:
        """One prefix [1, C] and n continuations of it [n, L] (right-padded) -> the last hidden states [n, 1 + L, d]
        at positions C - 1 .. C + L - 1, with hard decisions: what ``hidden_states`` of each prefix + continuation
        gives there, with the prefix run once (``PrunedAttention.continue_after``). Row i's state j predicts its
        continuation's token j. For the choices of a zero-shot item, which share their context."""
        if prefix_ids.dim() != 2 or prefix_ids.shape[0] != 1 or continuation_ids.dim() != 2:
            raise ValueError(f"prefix_ids must be [1, C] and continuation_ids [n, L], got shapes "
                             f"{tuple(prefix_ids.shape)} and {tuple(continuation_ids.shape)}")
        C = prefix_ids.shape[1]
        self.check_length(C + continuation_ids.shape[1])
        prune = prune and self.prunes
        if prune and not self.config.pruning.irreversible:
            raise ValueError("continuation_hidden_states follows irreversible drops; this model was built with "
                             "PruningConfig(irreversible=False): run hidden_states on each full sequence instead")
        h, x = self.embed(prefix_ids), self.embed(continuation_ids, start=C)
        first = first_all = None  # effective first drops: of the prefix [1, C], of every sequence [n, C + L]
        for block in self.blocks:
            attention, prefix_in = block.attention, block.attn_input(h)
            if prune:
                a, first, k, v, k_int = attention.prefill_chunked(prefix_in, budget, first if self.propagates else None,
                                                                  chunk=self.prefill_chunk)
            else:
                a, _, _, k, v, k_int = attention(prefix_in, HARD, budget, False)
            h = h + a
            h = h + block.feed_forward(h)
            c, first_all = attention.continue_after(block.attn_input(x), (k, v, k_int, first), budget,
                                                    first_all if self.propagates else None)
            x = x + c
            x = x + block.feed_forward(x)
        return torch.cat([h[:, -1:].expand(x.shape[0], -1, -1), x], dim=1)

    def _check_ids(self, input_ids: torch.Tensor) -> None:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, time], got shape {tuple(input_ids.shape)}")
        self.check_length(input_ids.shape[1])

    # ------------------------------------------------------------------ generation with a KV cache

    def new_cache(self, batch: int, capacity: int, prune: bool, compact_every: float = 0.0) -> KVCache:
        """An empty cache of G key/value heads per layer; ``compact_every``: see bab.context.kv_cache.LayerKV."""
        c = self.config
        if prune and self.prunes and not c.pruning.irreversible:
            raise ValueError("a KV cache can only forget tokens for good when dropping is irreversible; this model "
                             "was built with PruningConfig(irreversible=False): generate with prune=False")
        int_dim = c.pruning.r if (prune and self.prunes) else None
        p = next(self.parameters())
        heads, head_dim = self.kv_shape
        return KVCache([LayerKV(batch, heads, head_dim, int_dim, capacity, p.dtype, p.device,
                                compact_every=compact_every) for _ in range(len(self.blocks))])

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, cache: KVCache, budget: float | None = None,
                prune: bool = True) -> torch.Tensor:
        """Run the prompt [B, T] with hard decisions; fill the cache with the tokens still alive. -> logits [B, V]."""
        T = input_ids.shape[1]
        self.check_length(T)
        if not (prune and self.prunes):  # dense: the fused causal kernel

            def fill(i, _, __, k, v, k_int):
                cache.layers[i].fill(k, v, k_int, None)

            h = self._run(self.embed(input_ids), HARD, budget, False, visit=fill)
        else:  # hard decisions in query chunks, no [B, T, T] float masks (PrunedAttention.prefill_chunked)
            h, first = self.embed(input_ids), None
            for block, layer_cache in zip(self.blocks, cache.layers, strict=True):
                a, effective_first, k, v, k_int = block.attention.prefill_chunked(
                    block.attn_input(h), budget, first if self.propagates else None, chunk=self.prefill_chunk)
                h = h + a
                h = h + block.feed_forward(h)
                layer_cache.fill(k, v, k_int, effective_first >= T)  # what the last token still sees
                first = effective_first
        cache.next_position = T
        return self.head(h[:, -1])

    @torch.no_grad()
    def decode_step(self, input_ids: torch.Tensor, cache: KVCache, budget: float | None = None,
                    prune: bool = True) -> torch.Tensor:
        """One new token per row, input_ids [B, 1] -> logits [B, V]; updates (and shrinks) the cache."""
        position = cache.next_position
        self.check_length(position + 1)
        prune = prune and self.prunes
        x = self.embed(input_ids, start=position)
        below = None  # depth propagation: the positions the layer below still holds
        for block, layer_cache in zip(self.blocks, cache.layers, strict=True):
            x = x + block.attention.step(block.attn_input(x), layer_cache, position, budget, prune,
                                         below if (prune and self.propagates) else None)
            x = x + block.feed_forward(x)
            below = layer_cache.alive_positions(position + 1)
        cache.next_position = position + 1
        return self.head(x[:, -1])

    @torch.no_grad()
    def token_drop_times(self, input_ids: torch.Tensor, budget: float | None = None) -> torch.Tensor:
        """[L, B, T]: the position whose arrival dropped each token in each layer (hard decisions), -1: never."""
        if not (self.prunes and self.config.pruning.irreversible):
            raise ValueError("drop times are defined for a model with irreversible context pruning")
        out = self.forward(input_ids, alpha=HARD, budget=budget, return_log_keep=True)
        return torch.stack([drop_times(lk) for lk in out.log_keep])


def load_checked(model: nn.Module, state: dict, what: str) -> nn.Module:
    """load_state_dict that tolerates only the (fresh) interaction parameters missing; a clear error otherwise."""
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise ValueError(f"state dict does not fit this {what}: {exc}") from exc
    missing = [k for k in missing if ".interaction." not in k]
    if missing or unexpected:
        raise ValueError(f"state dict does not fit this {what}: missing {missing}, unexpected {unexpected}")
    return model
