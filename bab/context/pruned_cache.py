"""A transformers ``Cache`` whose layers physically remove the tokens that dynamic context pruning drops.

Used with a model that ``bab.context.attach.attach`` prepared: ``model.generate(ids, past_key_values=PrunedCache())``
or ``model(ids, past_key_values=cache)``. Each call of a layer (the prompt, then one token per step) goes:

1. the attach pre-hook stages the layer's interaction and its input x [B, T, d] (``PrunedCache.stage``);
2. the attention module calls ``update(k, v)``: the new tokens' interaction queries score every cached token and
   every earlier new token (hard, ``scores > 0`` keeps); token j is visible to query k iff j <= k and no query in
   (j, k] dropped it (the irreversible cumulative product of 0/1 decisions). ``update`` returns the keys and values
   of the cached and new tokens and keeps their visibility mask [B, T, K] for the attention function; then it
   gathers out every token that some query of this call dropped, so the buffers hold only the tokens still alive
   for the next query (for the prompt: what its last token still sees) and their memory is released;
3. the "bab_context" attention function attends with that mask.

Rows of a batch drop different tokens: each row keeps its live tokens at the front of buffers sized to the longest
row, and ``valid`` [B, S] marks the padding slots, which the visibility mask hides. Every slot remembers its
position in the sequence (``positions``), which maps transformers' padding mask (built over the tokens seen) onto
the slots.

Positions: ``get_seq_length`` is the number of tokens *seen* (not kept), and ``get_mask_sizes`` sizes the mask over
the tokens seen, so the position ids (learned positions, RoPE) that transformers derives from them stay those of
the full sequence; ``generate`` counts positions itself from the attention mask.

Depth propagation (``PruningConfig.propagate_in_depth``): each layer publishes, per position, the first query that
dropped it (``first_by_position``), and the layer above takes the earlier of its own and that.

Shapes: B batch, G key/value heads, S cached slots, T new tokens, K = S + T, Dh head width, r interaction width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["PrunedCache", "PrunedLayer"]


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
    tensors (``tensors()``) follow beam search and batch expansion through one ``_map_batch(fn)``, which applies
    ``fn`` to every tensor with a batch dimension first."""

    def _map_batch(self, fn) -> None:
        raise NotImplementedError

    def tensors(self) -> list[torch.Tensor]:
        raise NotImplementedError

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
        """Bytes held by ``tensors()``."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices])


class PrunedLayer(RowMappedLayer):
    """One layer: keys / values [B, G, S, Dh], interaction keys [B, S, r], positions [B, S] (-1: padding), valid."""

    is_compileable = False
    is_sliding = False
    is_croppable = False  # a dropped token cannot come back, so a rollback cannot restore the cache

    def __init__(self, **kwargs):
        super().__init__()
        self.int_keys: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.valid: torch.Tensor | None = None
        self.seen = 0  # tokens this layer has been given, kept or not
        self.staged: _Staged | None = None
        self.key_positions: torch.Tensor | None = None  # [B, K]: positions of the keys the last update returned
        self.first_by_position: torch.Tensor | None = None  # [B, seen]: first query that dropped each position
        self._visible: torch.Tensor | None = None  # [B, T, K] of the last update, until the attention takes it

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        B, G, _, Dh = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(B, G, 0, Dh)
        self.values = value_states.new_zeros(B, value_states.shape[1], 0, value_states.shape[3])
        self.positions = torch.zeros(B, 0, dtype=torch.long, device=self.device)
        self.valid = torch.zeros(B, 0, dtype=torch.bool, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states [B, G, T, Dh] of T new tokens -> keys, values [B, G, S + T, Dh] to attend to."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        staged, self.staged = self.staged, None
        B, T, device = key_states.shape[0], key_states.shape[2], key_states.device
        keys = torch.cat([self.keys, key_states], dim=2)
        values = torch.cat([self.values, value_states], dim=2)
        new_positions = torch.arange(self.seen, self.seen + T, device=device)
        positions = torch.cat([self.positions, new_positions.expand(B, T)], dim=1)  # [B, K]
        valid = torch.cat([self.valid, torch.ones(B, T, dtype=torch.bool, device=device)], dim=1)
        never = self.seen + T  # "not dropped by any query of this call"
        first = torch.full_like(positions, never)
        int_keys = None
        if staged is not None:
            if self.int_keys is None and self.keys.shape[2] > 0:
                raise RuntimeError("this cache was filled with pruning off; it has no interaction keys to score")
            int_keys = staged.k_int if self.int_keys is None else torch.cat([self.int_keys, staged.k_int], dim=1)
            scores = staged.interaction.scores(staged.q_int, int_keys, staged.budget)  # [B, T, K]
            # query n drops key j when it scores it <= 0, for j before n only (a token never drops itself)
            drops = (scores <= 0) & (positions[:, None, :] < new_positions[None, :, None]) & valid[:, None, :]
            first = torch.where(drops, new_positions[None, :, None], never).amin(dim=1)  # [B, K]
            if staged.inherited is not None:
                first = torch.minimum(first, staged.inherited.gather(1, positions.clamp_min(0)))
        elif self.int_keys is not None:
            raise RuntimeError("this cache was filled with pruning on; turn pruning on again to continue it")
        # j is visible to query n iff it is a real slot, j <= n, and no query up to n dropped it
        self._visible = (valid[:, None, :] & (positions[:, None, :] <= new_positions[None, :, None])
                         & (new_positions[None, :, None] < first[:, None, :]))
        self.key_positions = positions
        self.seen = never
        self.first_by_position = None
        if staged is not None and staged.propagate:
            # positions this layer no longer holds were dropped earlier (0: before every query); padding slots
            # write into a spare last column
            by_position = torch.zeros(B, never + 1, dtype=torch.long, device=device)
            by_position.scatter_(1, positions.masked_fill(~valid, never), first)
            self.first_by_position = by_position[:, :never]
        self._keep(keys, values, int_keys, positions, valid & (first == never))
        return keys, values

    def _keep(self, keys, values, int_keys, positions, alive) -> None:
        """Store only the alive slots [B, K] of the call's keys, in their order, at the front of new buffers sized to
        the longest row; the old buffers, and the dropped tokens in them, are released."""
        counts = alive.sum(dim=1)  # [B]
        kept = int(counts.max()) if counts.numel() else 0
        if bool(alive.all()):
            self.keys, self.values, self.int_keys, self.positions, self.valid = keys, values, int_keys, positions, alive
            return
        # a stable sort puts each row's alive slots first, in order; slots past a row's count are padding
        order = torch.argsort((~alive).to(torch.uint8), dim=1, stable=True)[:, :kept]  # [B, S']
        valid = torch.arange(kept, device=alive.device)[None, :] < counts[:, None]

        def gather_slots(t):  # [B, G, K, Dh] -> [B, G, S', Dh]
            return t.gather(2, order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))

        self.keys, self.values = gather_slots(keys), gather_slots(values)
        if int_keys is not None:
            self.int_keys = int_keys.gather(1, order[:, :, None].expand(-1, -1, int_keys.shape[2]))
        else:
            self.int_keys = None
        self.positions = positions.gather(1, order).masked_fill(~valid, -1)
        self.valid = valid

    def pop_visible(self) -> torch.Tensor:
        """The visibility mask [B, T, K] of the last update (given once: it is freed here)."""
        visible, self._visible = self._visible, None
        if visible is None:
            raise RuntimeError("no visibility mask: the attention ran without this cache layer's update")
        return visible

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.keys, self.values, self.int_keys, self.positions, self.valid) if t is not None]

    def _map_batch(self, fn) -> None:
        """Apply fn to the batch axis of every per-row tensor (beam search, num_return_sequences)."""
        if not self.is_initialized:
            return
        self.keys, self.values = fn(self.keys), fn(self.values)
        self.positions, self.valid = fn(self.positions), fn(self.valid)
        if self.int_keys is not None:
            self.int_keys = fn(self.int_keys)
        if self.first_by_position is not None:
            self.first_by_position = fn(self.first_by_position)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a PrunedCache cannot be cropped: dropped tokens are gone, so no earlier state can "
                                  "be restored (assisted decoding needs a croppable cache)")

    def reset(self) -> None:
        self.__init__()


class PrunedCache(Cache):
    """Per-layer ``PrunedLayer`` caches, added as the layers first run (no model config needed)."""

    def __init__(self):
        super().__init__(layer_class_to_replicate=PrunedLayer)

    def _layer(self, layer_idx: int) -> PrunedLayer:
        while len(self.layers) <= layer_idx:
            self.layers.append(PrunedLayer())
        return self.layers[layer_idx]

    def stage(self, layer_idx: int, x: torch.Tensor, interaction, budget: float | None, propagate: bool) -> None:
        """Before layer ``layer_idx`` updates: its attention input x [B, T, d] and interaction (None: pruning off)."""
        layer = self._layer(layer_idx)
        if interaction is None:
            layer.staged = None
            return
        inherited = None
        if propagate and layer_idx > 0:
            inherited = self.layers[layer_idx - 1].first_by_position  # updated earlier in this forward
        layer.staged = _Staged(interaction.query(x), interaction.key(x), interaction, budget, inherited, propagate)

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)

    def live_tokens(self) -> torch.Tensor:
        """[L, B] tokens each layer holds for each row."""
        return torch.stack([layer.live_tokens() for layer in self.layers])
