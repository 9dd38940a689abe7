"""A batched KV cache that physically removes dropped tokens (not a mask over a full-size cache).

One ``LayerKV`` per layer holds keys / values [B, H, C, Dh], the interaction keys [B, C, r] (for
context pruning), the original position of every slot [B, C] and which slots hold a live token
[B, C] (rows of a batch drop different numbers of tokens, so a row can have trailing padding).
C is the buffer capacity; ``length`` slots are in use.

- ``append`` writes the new token into the next free slot (growing the buffer when full).
- ``compact(keep)`` gathers the live tokens of every row to the front of *new* buffers sized
  to the longest row plus a little headroom; the old buffers are released, so the memory of
  dropped tokens is actually freed. A dropped token is gone: nothing can bring it back.
  With ``compact_every = f > 0`` the copy waits until it would free at least a fraction f of
  the used slots; until then dropped tokens are dead slots (marked invalid at once, never
  attended again) — this amortises the copy when only a few tokens drop per step.

The dense baseline preallocates its full capacity once and only appends (no copies), which is
the fastest way to run a dense cache; the comparison in bab.context.bench is against that.
"""

from __future__ import annotations

import torch


class LayerKV:
    def __init__(self, batch: int, heads: int, head_dim: int, int_dim: int | None, capacity: int,
                 dtype=torch.float32, device=None, headroom: int = 16, compact_every: float = 0.0):
        if not 0.0 <= compact_every < 1.0:
            raise ValueError(f"compact_every must lie in [0, 1), got {compact_every}")
        self.headroom = headroom
        self.compact_every = compact_every
        self._allocate(batch, heads, head_dim, int_dim, capacity, dtype, device)
        self.length = 0

    def _allocate(self, batch, heads, head_dim, int_dim, capacity, dtype, device):
        self.keys = torch.zeros(batch, heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros(batch, heads, capacity, head_dim, dtype=dtype, device=device)
        self.int_keys = None if int_dim is None else torch.zeros(batch, capacity, int_dim, dtype=dtype, device=device)
        self.positions = torch.full((batch, capacity), -1, dtype=torch.long, device=device)
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def nbytes(self) -> int:
        """Bytes held by this layer's buffers (keys, values, interaction keys; the small index tensors too)."""
        tensors = [self.keys, self.values, self.positions, self.valid]
        if self.int_keys is not None:
            tensors.append(self.int_keys)
        return sum(t.numel() * t.element_size() for t in tensors)

    def live_tokens(self) -> torch.Tensor:
        """[B] number of live tokens per row."""
        return self.valid[:, : self.length].sum(dim=1)

    def all_valid(self) -> bool:
        return bool(self.valid[:, : self.length].all())

    def view(self):
        """(keys, values, int_keys, valid) restricted to the used slots."""
        n = self.length
        int_keys = None if self.int_keys is None else self.int_keys[:, :n]
        return self.keys[:, :, :n], self.values[:, :, :n], int_keys, self.valid[:, :n]

    def alive_positions(self, n_positions: int) -> torch.Tensor:
        """[B, n_positions] bool: which sequence positions this layer still holds (live slots)."""
        n = self.length
        valid = self.valid[:, :n]
        # dead slots write into a spare last column, so they never race a live slot for the same index
        index = self.positions[:, :n].masked_fill(~valid, n_positions)
        alive = torch.zeros(self.valid.shape[0], n_positions + 1, dtype=torch.bool, device=self.valid.device)
        return alive.scatter_(1, index, valid)[:, :n_positions]

    def holds(self, alive: torch.Tensor) -> torch.Tensor:
        """[B, length] bool: whether each used slot's position is marked in ``alive`` [B, P] (another layer's
        ``alive_positions``); depth propagation drops from this layer what the layer below dropped."""
        n = self.length
        return alive.gather(1, self.positions[:, :n].clamp_min(0)) & self.valid[:, :n]

    def append(self, k: torch.Tensor, v: torch.Tensor, k_int: torch.Tensor | None, position: int) -> None:
        """k, v [B, H, 1, Dh]; k_int [B, 1, r] or None; position: the token's index in the sequence."""
        if self.length == self.capacity:
            self._resize(self.capacity + self.headroom)
        n = self.length
        self.keys[:, :, n] = k[:, :, 0]
        self.values[:, :, n] = v[:, :, 0]
        if self.int_keys is not None:
            self.int_keys[:, n] = k_int[:, 0]
        self.positions[:, n] = position
        self.valid[:, n] = True
        self.length = n + 1

    def fill(self, k: torch.Tensor, v: torch.Tensor, k_int: torch.Tensor | None, alive: torch.Tensor | None) -> None:
        """Start from a prompt: k, v [B, H, T, Dh], k_int [B, T, r], alive [B, T] bool (None: all alive)."""
        T = k.shape[2]
        if T > self.capacity:
            self._resize(T + self.headroom)
        self.keys[:, :, :T] = k
        self.values[:, :, :T] = v
        if self.int_keys is not None:
            self.int_keys[:, :T] = k_int
        self.positions[:, :T] = torch.arange(T, device=k.device)
        self.valid[:, :T] = True
        self.length = T
        if alive is not None and not bool(alive.all()):
            self.compact(alive)

    def compact(self, keep: torch.Tensor) -> None:
        """Remove every slot where ``keep`` [B, length] is False (and padding); copy the rest into new buffers."""
        n = self.length
        keep = keep & self.valid[:, :n]
        if bool(keep.all()):
            return
        counts = keep.sum(dim=1)  # [B]
        new_len = int(counts.max())
        if n - new_len < self.compact_every * n:
            # Too few slots to free for a copy to pay off: the dropped tokens become dead slots at once
            # (never attended again) and leave the buffers at the next compaction.
            self.valid[:, :n] = keep
            return
        capacity = new_len + self.headroom
        # stable sort puts each row's kept slots first, in their original order; the slots past new_len
        # (headroom) gather arbitrary old entries that are marked invalid below and overwritten by appends
        order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)
        if capacity > n:
            order = torch.cat([order, order[:, :1].expand(-1, capacity - n)], dim=1)
        order = order[:, :capacity]  # [B, capacity]
        B, H, C, Dh = self.keys.shape
        # One indexing copy per buffer straight into new, smaller tensors; the old buffers (and the dropped
        # tokens in them) are released when these replace them. Advanced indexing over [B*H, C, Dh] moves
        # whole Dh-vectors (an elementwise gather with an expanded index was 10x slower on CPU).
        rows = torch.arange(B * H, device=keep.device)[:, None]
        head_order = order.repeat_interleave(H, dim=0)  # [B*H, capacity]
        self.keys = self.keys.view(B * H, C, Dh)[rows, head_order].view(B, H, capacity, Dh)
        self.values = self.values.view(B * H, C, Dh)[rows, head_order].view(B, H, capacity, Dh)
        if self.int_keys is not None:
            self.int_keys = self.int_keys[torch.arange(B, device=keep.device)[:, None], order]
        self.valid = torch.arange(capacity, device=keep.device)[None, :] < counts[:, None]
        self.positions = self.positions[:, :n].gather(1, order).masked_fill(~self.valid, -1)
        self.length = new_len

    def _resize(self, capacity: int) -> None:
        old = (self.keys, self.values, self.int_keys, self.positions, self.valid)
        B, H, _, Dh = self.keys.shape
        int_dim = None if self.int_keys is None else self.int_keys.shape[2]
        self._allocate(B, H, Dh, int_dim, capacity, self.keys.dtype, self.keys.device)
        n = self.length
        self.keys[:, :, :n], self.values[:, :, :n] = old[0][:, :, :n], old[1][:, :, :n]
        if int_dim is not None:
            self.int_keys[:, :n] = old[2][:, :n]
        self.positions[:, :n], self.valid[:, :n] = old[3][:, :n], old[4][:, :n]


class KVCache:
    """The per-layer caches of one batched generation, and where the next token goes."""

    def __init__(self, layers: list[LayerKV]):
        self.layers = layers
        self.next_position = 0

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)

    def live_tokens(self) -> torch.Tensor:
        """[L, B] live tokens per layer and row."""
        return torch.stack([layer.live_tokens() for layer in self.layers])
