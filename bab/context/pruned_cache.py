"""A transformers ``Cache`` whose layers physically remove the tokens that dynamic context pruning drops.

Used with a model that ``bab.context.attach.attach`` prepared: ``model.generate(ids, past_key_values=PrunedCache())``
or ``model(ids, past_key_values=cache)``. Each call of a layer (the prompt, then one token per step) goes:

1. the attach pre-hook stages the layer's interaction and its input x [B, T, d] (``PrunedCache.stage``);
2. the attention module calls ``update(k, v)``: the new tokens are written in place into the free slots after the
   cached ones, and their interaction queries score every cached token and every earlier new token (hard,
   ``scores > 0`` keeps); token j is visible to query k iff j <= k and no query in (j, k] dropped it (the
   irreversible cumulative product of 0/1 decisions). ``update`` returns the keys and values of the cached and new
   tokens and keeps what each new token sees (``Visibility``: [B, K] vectors, from which the mask of any block of
   queries follows) for the attention function; every token that some query of this call dropped then becomes a
   dead slot, invisible to every later query;
3. the "bab_context" attention function attends with that mask, a block of queries at a time (``PREFILL_CHUNK``),
   each block over the slots up to its last query, so no [B, T, K] mask is ever built.

docs/context-pruning.md ("Generation with a cache that really shrinks") says the rest: the preallocated buffers,
grown by 1/``SLACK`` and compacted once dead slots are ``COMPACT_AT`` of those in use (``SLIDE_AT`` for the tokens a
sliding window passed, ``stage(window=W)``), so a decode step writes only its own token; a layer that keeps no
per-slot positions until its first drop; rows of a batch that drop different tokens (``valid`` [B, C] marks each
row's live slots, ``positions`` their place in the sequence, -1 where none); ``nbytes()`` (as allocated) against
``live_nbytes()``; and the positions: ``get_seq_length`` and ``get_mask_sizes`` count the tokens seen, not kept, so
position ids (learned, RoPE) stay those of the full sequence.

Depth propagation (``PruningConfig.propagate_in_depth``): each layer publishes, per position, the first query that
dropped it (``first_by_position``), and the layer above takes the earlier of its own and that.

Shapes: B batch, G key/value heads, C allocated slots, S slots in use, T new tokens, K = S + T, Dh head width,
r interaction width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["PrunedCache", "PrunedLayer", "RowMappedCache", "RowMappedLayer", "Visibility"]


@dataclass
class Visibility:
    """Which slots the queries of one update see, kept as [B, K] vectors rather than a [B, T, K] mask: the call's
    query at position n sees slot j iff j is live, ``positions[j] <= n`` and ``n < first[j]`` (no query up to n
    dropped it). ``mask`` builds it for a block of queries, so a long call (the prompt) is attended block by block
    and never holds [B, T, K]."""

    positions: torch.Tensor  # [B, K]: the position each slot holds (-1: none), as the update found them
    valid: torch.Tensor  # [B, K]: live slots, likewise
    first: torch.Tensor  # [B, K]: the first of the call's queries that dropped each slot (seen + T: none)
    seen: int  # tokens the layer had been given before the call
    new: int  # T: the call's new tokens, in the last T slots
    in_order: bool  # slot i holds position i in every row (dead slots are invisible all the same)

    def keys(self, stop: int) -> int:
        """Slots the call's queries before ``stop`` may see: the cached ones and the new tokens up to them."""
        return self.positions.shape[1] - self.new + stop

    def mask(self, start: int, stop: int) -> torch.Tensor:
        """[B, stop - start, keys(stop)]: what the call's queries start .. stop - 1 see."""
        keys = self.keys(stop)
        positions, valid, first = self.positions[:, :keys], self.valid[:, :keys], self.first[:, :keys]
        queries = torch.arange(self.seen + start, self.seen + stop, device=positions.device)[None, :, None]
        return valid[:, None, :] & (positions[:, None, :] <= queries) & (queries < first[:, None, :])


@dataclass
class _Staged:
    """A layer's interaction for its next update: queries q_int and keys k_int [B, T, r] of the new tokens."""

    q_int: torch.Tensor
    k_int: torch.Tensor
    interaction: object  # ContextInteraction: scores(q_int, k_int, budget) -> [B, T, K]
    budget: float | None
    inherited: torch.Tensor | None  # [B, seen + T]: the layer below's first drop per position (depth propagation)
    propagate: bool  # publish this layer's first drops for the layer above


class RowMappedLayer(CacheLayerMixin):
    """A cache layer that holds some of the tokens it has seen (``seen``) in slots, each row's marked by ``valid``
    [B, S]. Positions and masks count the tokens seen, so position ids stay those of the full sequence. Its per-row
    tensors follow beam search and batch expansion through one ``_map_batch(fn)``, which applies ``fn`` to every
    tensor with a batch dimension first: the slot buffers named in ``BUFFERS`` (``tensors()``, what ``nbytes``
    counts) and the other per-row tensors named in ``PER_ROW``; a name whose tensor is None is passed over. A
    dropped token cannot come back, so a rollback (``crop``) cannot restore the cache."""

    is_compileable = False
    is_sliding = False
    is_croppable = False
    BUFFERS: tuple[str, ...] = ("keys", "values")
    PER_ROW: tuple[str, ...] = ()
    NAME, GONE = "a PrunedCache", "dropped"  # the cache and what it does to a token, for ``crop``'s message

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Empty key and value buffers [B, G, 0, Dh] of the states' batch, heads, width, dtype and device."""
        B, G, _, Dh = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(B, G, 0, Dh)
        self.values = value_states.new_zeros(B, value_states.shape[1], 0, value_states.shape[3])
        self.is_initialized = True

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (getattr(self, name) for name in self.BUFFERS) if t is not None]

    def _map_batch(self, fn) -> None:
        """Apply fn to the batch axis of every per-row tensor (beam search, num_return_sequences)."""
        if not self.is_initialized:
            return
        for name in self.BUFFERS + self.PER_ROW:
            if getattr(self, name) is not None:
                setattr(self, name, fn(getattr(self, name)))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError(f"{self.NAME} cannot be cropped: {self.GONE} tokens are gone, so no earlier state "
                                  f"can be restored (assisted decoding needs a croppable cache)")

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """The mask spans every token seen plus the new ones (the attention maps it onto the kept slots)."""
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        """Tokens seen, not tokens kept: transformers derives the new tokens' positions from it."""
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def live_tokens(self) -> torch.Tensor:
        """[B] tokens each row holds."""
        return self.valid.sum(dim=1)

    def nbytes(self) -> int:
        """Bytes held by ``tensors()``: every slot allocated, whether a live token, padding or room to grow."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def live_nbytes(self) -> int:
        """The share of ``nbytes()`` that holds live tokens: what buffers without padding or spare slots would
        take."""
        slots = self.valid.numel()  # B x allocated slots; every tensor has that many slots
        per_slot = sum(t.numel() // slots * t.element_size() for t in self.tensors()) if slots else 0
        return per_slot * int(self.valid.sum())

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices])


class PrunedLayer(RowMappedLayer):
    """One layer: buffers of C slots per row, S of them in use (``used``; the rest free): keys / values
    [B, G, C, Dh], interaction keys [B, C, r], positions [B, C] (-1: no live token) and valid [B, C]. A dropped
    token stays as a dead slot (invalid, position -1) until a compaction (see the module docstring)."""

    # (positions and validity are None while the layer has dropped nothing)
    BUFFERS = ("keys", "values", "int_keys", "_positions", "_valid")
    PER_ROW = ("first_by_position",)

    # A new buffer holds 1/SLACK more slots than it needs (at least one; none in a sliding-window layer, whose
    # tokens leave as fast as they come): room for that many appends before a copy, at most 3% over the tokens held.
    SLACK = 32
    COMPACT_AT = 0.1  # compact once this fraction of the used slots could be freed
    # ... or, in a layer that has dropped nothing (only its sliding window's oldest tokens are dead, a prefix of its
    # slots), once this fraction could: slack and dead slots together stay under 5% of the tokens held
    SLIDE_AT = 1 / 64
    PREFILL_CHUNK = 256  # queries scored at once by a long call: bounds its [B, chunk, K] score tensors

    def __init__(self, **kwargs):
        super().__init__()
        self.int_keys: torch.Tensor | None = None
        # Slot positions and validity [B, C], or None while the layer has dropped nothing: then slot i < used holds
        # position ``base + i`` in every row, dead for i < ``dead`` (tokens its sliding window has passed), live
        # after, and neither tensor is kept (``positions`` and ``valid`` compute them when asked).
        self._positions: torch.Tensor | None = None
        self._valid: torch.Tensor | None = None
        self.base = 0
        self.dead = 0
        self.window: int | None = None  # a query n sees tokens j > n - window (transformers' sliding window)
        self.used = 0  # slots written so far (live or dead); slots past it are free
        self.seen = 0  # tokens this layer has been given, kept or not
        self.staged: _Staged | None = None
        self.first_by_position: torch.Tensor | None = None  # [B, seen]: first query that dropped each position
        self._visibility: Visibility | None = None  # of the last update, until the attention takes it

    @property
    def in_order(self) -> bool:
        """Whether the layer has dropped nothing, so its slots' positions follow from ``base`` and ``dead``."""
        return self._positions is None

    @property
    def positions(self) -> torch.Tensor | None:
        """[B, C]: the position each slot holds, -1 where no live token is."""
        if not self.in_order or not self.is_initialized:
            return self._positions
        slot = torch.arange(self.slots(), device=self.device)
        live = (slot >= self.dead) & (slot < self.used)
        return torch.where(live, slot + self.base, -1).expand(self.keys.shape[0], -1)

    @property
    def valid(self) -> torch.Tensor | None:
        """[B, C]: the live slots."""
        if not self.in_order or not self.is_initialized:
            return self._valid
        slot = torch.arange(self.slots(), device=self.device)
        return ((slot >= self.dead) & (slot < self.used)).expand(self.keys.shape[0], -1)

    def _materialise(self) -> None:
        """Keep positions and validity per slot from now on (the first token pruning drops)."""
        if self.in_order:
            self._positions, self._valid = self.positions.clone(), self.valid.clone()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states [B, G, T, Dh] of T new tokens -> keys, values [B, G, S + T, Dh] to attend to
        (views of the buffers: the used slots, dead ones included, then the new tokens)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        staged, self.staged = self.staged, None
        if staged is not None and self.int_keys is None and self.used > 0:
            raise RuntimeError("this cache was filled with pruning off; it has no interaction keys to score")
        if staged is None and self.int_keys is not None:
            raise RuntimeError("this cache was filled with pruning on; turn pruning on again to continue it")
        T = key_states.shape[2]
        K = self.used + T
        in_order = self.in_order
        self._append(key_states, value_states, None if staged is None else staged.k_int)
        keys, values = self.keys[:, :, :K], self.values[:, :, :K]
        positions, valid = self.positions[:, :K], self.valid[:, :K]
        never = self.seen + T  # "not dropped by any query of this call"
        first = torch.full_like(positions, never)
        if staged is not None:
            first = self._first_drops(staged, self.int_keys[:, :K], positions, valid, self.seen)
            if staged.inherited is not None:
                first = torch.minimum(first, staged.inherited.gather(1, positions.clamp_min(0)))
        # copies: the drops below clear the slots in place, after the call's own queries have seen them
        self._visibility = Visibility(positions.clone(), valid.clone(), first, self.seen, T,
                                      in_order=in_order and self.base == 0)
        self.seen = never
        self.first_by_position = None
        if staged is not None and staged.propagate:
            # positions this layer no longer holds were dropped earlier (0: before every query); dead slots write
            # into a spare last column
            by_position = torch.zeros(positions.shape[0], never + 1, dtype=torch.long, device=positions.device)
            by_position.scatter_(1, positions.masked_fill(~valid, never), first)
            self.first_by_position = by_position[:, :never]
        dropped = valid & (first < never)
        if in_order and staged is not None and bool(dropped.any()):
            self._materialise()  # the first drop: from now on each slot's position and validity are kept
            positions, valid = self._positions[:, :K], self._valid[:, :K]
        if self.window is not None:
            # the next query (position ``never``) and all later ones see only tokens j > never - window: the older
            # ones leave, as they do from transformers' own sliding-window cache layers
            if self.in_order:
                self.dead = min(max(self.dead, never - self.window + 1 - self.base), self.used)
            else:
                dropped |= valid & (positions <= never - self.window)
        if not self.in_order:
            valid &= ~dropped  # in place: the slots die in the buffers (the mask above is already built)
            positions.masked_fill_(dropped, -1)
        if self._compaction_due():
            self._compact()  # new buffers; the views returned here keep the old ones until the attention is done
        return keys, values

    def _append(self, key_states, value_states, k_int) -> None:
        """Write T new tokens (keys, values [B, G, T, Dh], interaction keys [B, T, r] or None) into the slots past
        the used ones, growing the buffers first if they are full."""
        T, n = key_states.shape[2], self.used
        if n + T > self.slots():
            self._reallocate(n + T)
        if k_int is not None and self.int_keys is None:
            self.int_keys = k_int.new_zeros(k_int.shape[0], self.slots(), k_int.shape[2])
        self.keys[:, :, n:n + T] = key_states
        self.values[:, :, n:n + T] = value_states
        if k_int is not None:
            self.int_keys[:, n:n + T] = k_int
        if not self.in_order:  # (in order: slot n holds position base + n = seen, as computed)
            self._positions[:, n:n + T] = torch.arange(self.seen, self.seen + T, device=self.device)
            self._valid[:, n:n + T] = True
        self.used = n + T

    def _first_drops(self, staged: _Staged, int_keys, positions, valid, seen: int) -> torch.Tensor:
        """[B, K]: the first of the call's queries (positions seen .. seen + T - 1) that drops each slot of
        ``int_keys`` [B, K, r] (``seen + T``: none). Query n drops slot j when it scores it <= 0 and j is live and
        earlier than n (a token never drops itself). The queries go in chunks, each scoring only the slots before
        its last query (the later new tokens are not earlier than any of them), so a long call (the prompt) never
        holds a [B, T, K] score tensor and scores about the causal half of it."""
        T = staged.q_int.shape[1]
        never = seen + T
        first = torch.full_like(positions, never)
        for start in range(0, T, self.PREFILL_CHUNK):
            q_int = staged.q_int[:, start:start + self.PREFILL_CHUNK]
            stop = start + q_int.shape[1]
            keys = positions.shape[1] - T + stop  # the cached slots and the new tokens up to this chunk's last
            queries = torch.arange(seen + start, seen + stop, device=positions.device)
            scores = staged.interaction.scores(q_int, int_keys[:, :keys], staged.budget)  # [B, t, keys]
            drops = (scores <= 0) & (positions[:, None, :keys] < queries[None, :, None])
            # argmax finds the first True along the queries (or 0 when there is none, which the gather tells)
            index = drops.view(torch.uint8).argmax(dim=1, keepdim=True)  # [B, 1, keys]
            earlier = first[:, :keys]
            dropped_here = drops.gather(1, index)[:, 0] & (earlier == never)  # an earlier chunk's drop stands
            first[:, :keys] = torch.where(dropped_here, queries[index[:, 0]], earlier)
        return first.masked_fill_(~valid, never)  # dead and spare slots are not dropped again

    def _compaction_due(self) -> bool:
        """Whether removing the dead slots would free at least ``COMPACT_AT`` of the used ones (the longest row's
        live tokens bound the buffers)."""
        if self.in_order:
            return self.dead > 0 and self.dead >= self.SLIDE_AT * self.used
        freed = self.used - int(self._valid.sum(dim=1).max()) if self.used else 0
        return freed > 0 and freed >= self.COMPACT_AT * self.used

    def _compact(self) -> None:
        """Move each row's live slots, in order, to the front of new buffers sized to the longest row (plus slack);
        the old buffers, and the dead slots in them, are released."""
        if self.in_order:  # the live slots are one run: [dead, used)
            kept = self.used - self.dead
            self._reallocate(kept, start=self.dead)
            self.base, self.dead, self.used = self.base + self.dead, 0, kept
            return
        alive = self._valid[:, :self.used]
        kept = int(alive.sum(dim=1).max())
        # a stable sort puts each row's live slots first, in order; slots past a row's count are padding
        order = torch.argsort((~alive).to(torch.uint8), dim=1, stable=True)[:, :kept]  # [B, kept]
        self._reallocate(kept, order)
        self.used = kept

    def _reallocate(self, needed: int, order: torch.Tensor | None = None, start: int = 0) -> None:
        """New buffers of ``needed`` slots plus 1/SLACK more, their first slots filled from the old ones: the used
        slots from ``start`` on as they are, or those ``order`` [B, n] picks in each row (n <= needed); the rest are
        free."""
        B = self.keys.shape[0]
        n = self.used - start if order is None else order.shape[1]
        capacity = needed + (needed // self.SLACK if self.window is not None else max(needed // self.SLACK, 1))

        def moved(t: torch.Tensor, slot_dim: int) -> torch.Tensor:
            fresh = t.new_zeros(*t.shape[:slot_dim], capacity, *t.shape[slot_dim + 1:])
            if order is None:
                fresh.narrow(slot_dim, 0, n).copy_(t.narrow(slot_dim, start, n))
            elif slot_dim == 1:
                fresh[:, :n] = t[torch.arange(B, device=t.device)[:, None], order]
            else:  # [B, G, C, Dh]: advanced indexing over [B * G, C, Dh] moves whole Dh-vectors (a gather with an
                # expanded index is several times slower on CPU)
                G, C, Dh = t.shape[1:]
                rows = torch.arange(B * G, device=t.device)[:, None]
                fresh[:, :, :n] = t.reshape(B * G, C, Dh)[rows, order.repeat_interleave(G, dim=0)].view(B, G, n, Dh)
            return fresh

        self.keys, self.values = moved(self.keys, 2), moved(self.values, 2)
        if self.int_keys is not None:
            self.int_keys = moved(self.int_keys, 1)
        if not self.in_order:
            self._valid = moved(self._valid, 1)
            self._positions = moved(self._positions, 1).masked_fill_(~self._valid, -1)

    def slots(self) -> int:
        """Slots allocated per row (live, dead, padding and free)."""
        return self.keys.shape[2]

    def pop_visibility(self) -> Visibility:
        """What the last update's queries see (given once: it is freed here)."""
        visibility, self._visibility = self._visibility, None
        if visibility is None:
            raise RuntimeError("no visibility: the attention ran without this cache layer's update")
        return visibility

    def reset(self) -> None:
        self.__init__()


class RowMappedCache(Cache):
    """Per-layer ``RowMappedLayer`` caches, added as the layers first run (``new_layer()``; no model config needed)."""

    def new_layer(self) -> RowMappedLayer:
        raise NotImplementedError

    def _layer(self, layer_idx: int) -> RowMappedLayer:
        while len(self.layers) <= layer_idx:
            self.layers.append(self.new_layer())
        return self.layers[layer_idx]

    def nbytes(self) -> int:
        """Bytes the layers' buffers hold, as allocated."""
        return sum(layer.nbytes() for layer in self.layers)

    def live_nbytes(self) -> int:
        """Bytes of the live tokens in them (``nbytes()`` less the dead, padding and spare slots)."""
        return sum(layer.live_nbytes() for layer in self.layers)

    def live_tokens(self) -> torch.Tensor:
        """[L, B] tokens each layer holds for each row."""
        return torch.stack([layer.live_tokens() for layer in self.layers])


class PrunedCache(RowMappedCache):
    """Per-layer ``PrunedLayer`` caches."""

    def __init__(self):
        super().__init__(layer_class_to_replicate=PrunedLayer)

    def new_layer(self) -> PrunedLayer:
        return PrunedLayer()

    def stage(self, layer_idx: int, x: torch.Tensor, interaction, budget: float | None, propagate: bool,
              window: int | None = None) -> None:
        """Before layer ``layer_idx`` updates: its attention input x [B, T, d], interaction (None: pruning off) and
        sliding window (None: none, or kept: with depth propagation a token the window passed may still matter to
        the layer above, whose drops this layer's publish)."""
        layer = self._layer(layer_idx)
        if layer.window != window and layer.seen > 0:
            raise ValueError(f"layer {layer_idx} of this PrunedCache was filled with sliding window {layer.window}, "
                             f"now {window}")
        layer.window = window
        if interaction is None:
            layer.staged = None
            return
        inherited = None
        if propagate and layer_idx > 0:
            inherited = self.layers[layer_idx - 1].first_by_position  # updated earlier in this forward
        layer.staged = _Staged(*interaction.project(x), interaction, budget, inherited, propagate)
