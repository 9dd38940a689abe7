"""Training-free KV-cache eviction policies: the baselines beside learned context pruning, at an equal budget.

A policy decides, after each call of a layer (the prompt, a chunk, or one token), which of the slots the layer
holds it keeps; ``bab.context.evicting_cache.EvictingCache`` asks it and removes the rest for good. StreamingLLM,
TOVA and H2O keep one set of positions per layer and row, shared by all of the layer's heads; SnapKV keeps one set
per key/value head by default (``per_head``), each the same size.

The budget is what a policy may keep after a call, counted in real tokens (batch padding never counts and is never
kept):

- an ``int`` n >= 1: at most n tokens (a fixed cache size, as the papers state their budgets);
- a ``float`` f in (0, 1]: at most ceil(f * tokens seen) tokens (a fixed fraction of the context, the axis on which
  learned pruning is compared).

A budget at least the sequence length keeps everything: the model then decodes exactly as with a DynamicCache.

Policies (each ``scores`` a call's slots; the ``keep_count`` highest-scoring real slots stay, ties to the earlier),
each class's docstring saying what it keeps: ``StreamingLLM`` (Xiao et al. 2023, "Efficient Streaming Language
Models with Attention Sinks"), ``TOVA`` (Oren et al. 2024, "Transformers are Multi-State RNNs"), ``H2O`` (Zhang et
al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models"; the paper keeps a
set per head, here a layer's heads share one, as TOVA's) and ``SnapKV`` (Li et al. 2024, "SnapKV: LLM Knows What You
are Looking for Before Generation"). StreamingLLM, TOVA and SnapKV follow the definitions of NVIDIA's kvpress
(``kvpress/presses/streaming_llm_press.py``, ``tova_press.py``, ``snapkv_press.py``, ``scorer_press.py``).

Shapes: B batch, H query heads, G key/value heads, T the call's queries, K slots after the call (cached, then the
call's new tokens). A per-layer policy sees positions and real [B, K]; a per-head one [B, G, K].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["H2O", "TOVA", "EvictionPolicy", "SlotView", "SnapKV", "StreamingLLM", "budget_for_fraction",
           "check_budget", "pairs_kept"]


def check_budget(budget) -> int | float:
    """An int >= 1 (tokens) or a float in (0, 1] (fraction of the tokens seen); anything else raises ValueError."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise ValueError(f"budget must be a number of tokens (int >= 1) or a fraction of the tokens seen (float in "
                         f"(0, 1]), got {budget!r}")
    if isinstance(budget, int) and budget < 1:
        raise ValueError(f"a budget in tokens must be >= 1, got {budget}")
    if isinstance(budget, float) and not 0 < budget <= 1:
        raise ValueError(f"a budget as a fraction of the tokens seen must lie in (0, 1], got {budget} (pass an int "
                         "for a number of tokens)")
    return budget


def pairs_kept(context: int, tokens: int) -> float:
    """Share of (query, earlier token) pairs a window of ``context`` tokens keeps when fed token by token with at most
    ``tokens`` held (StreamingLLM, TOVA, H2O at an int budget): query t sees min(t, tokens) of its t earlier tokens."""
    total = context * (context - 1) // 2
    return sum(min(t, tokens) for t in range(context)) / total if total else 1.0


def budget_for_fraction(context: int, fraction: float) -> int:
    """The smallest int budget whose ``pairs_kept`` over a window of ``context`` tokens is at least ``fraction``:
    the token budget that compares with learned pruning keeping that fraction of pairs (1 - fraction_pruned)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    return next(n for n in range(1, context + 1) if pairs_kept(context, n) >= fraction - 1e-12)


@dataclass
class SlotView:
    """One layer and call, after the call's attention: every slot the layer holds, cached ones then the new tokens.

    positions [B, K] (per-layer policy) or [B, G, K] (``per_head``): each slot's position in the sequence,
        ascending along a row (and head).
    real: as positions: the slot holds a real token (not batch padding nor an empty slot of a shorter row).
    seen [B]: real tokens this row has been given, kept or not.
    weights [B, H, T, K] or None: attention probabilities of the call's queries (for policies with needs_attention);
        query head h attends over the slots of key/value head h // (H / G).
    mass [B, K] or None: attention each slot received over all queries so far (this call's included), mean over
        heads (for policies with accumulates_attention).
    """

    positions: torch.Tensor
    real: torch.Tensor
    seen: torch.Tensor
    weights: torch.Tensor | None = None
    mass: torch.Tensor | None = None


class EvictionPolicy:
    """What to keep of a layer's slots after a call. Subclasses implement ``scores``; ``keep`` does the rest."""

    needs_attention = False  # the cache computes attention weights (eager, slower than SDPA) only for these
    accumulates_attention = False  # the cache keeps each slot's attention mass so far (SlotView.mass) for these
    per_head = False  # True: a set of slots per key/value head (SlotView and keep() [B, G, K]), else per layer
    name = "policy"

    def __init__(self, budget: int | float):
        self.budget = check_budget(budget)

    def keep_count(self, seen: torch.Tensor) -> torch.Tensor:
        """[B] -> [B]: how many real tokens a row may keep having seen ``seen``."""
        if isinstance(self.budget, int):
            wanted = torch.full_like(seen, self.budget)
        else:  # the epsilon keeps 0.3 * 10 at 3, not 4
            wanted = torch.ceil(self.budget * seen.double() - 1e-9).long()
        return torch.minimum(wanted, seen)

    def scores(self, view: SlotView, keep: torch.Tensor) -> torch.Tensor:
        """[B, K] ([B, G, K] per head): higher stays. ``keep`` [B]: the tokens each row (each of its heads) keeps."""
        raise NotImplementedError

    def keep(self, view: SlotView) -> torch.Tensor:
        """[B, K] ([B, G, K] per head) bool: the slots that stay, the ``keep_count`` real slots that score highest
        along the last axis (ties to the earlier)."""
        count = self.keep_count(view.seen)
        scores = self.scores(view, count).float().masked_fill(~view.real, -math.inf)
        order = torch.argsort(scores, dim=-1, descending=True, stable=True)
        rank = torch.empty_like(order)
        rank.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
        count = count.view(-1, *[1] * (scores.dim() - 1))
        return (rank < count) & view.real

    def describe(self) -> str:
        return f"{self.name}(budget={self.budget})"

    def __repr__(self) -> str:
        return self.describe()


def _rank(real: torch.Tensor) -> torch.Tensor:
    """[..., K] -> [..., K]: each real slot's index among its row's (head's) real slots (0: the oldest held)."""
    return real.long().cumsum(dim=-1) - 1


def _age(real: torch.Tensor) -> torch.Tensor:
    """[..., K] -> [..., K]: how many real slots are newer than each (0: the newest real slot)."""
    return real.long().sum(dim=-1, keepdim=True) - 1 - _rank(real)


class StreamingLLM(EvictionPolicy):
    """The first ``sinks`` tokens (attention sinks) and the most recent ones, the rest of the budget: as kvpress's
    ``StreamingLLMPress``, which scores 1 every token but the n_pruned right after the sinks.

    Sinks are never evicted, so the oldest real slots a layer holds are always the sequence's first tokens. With an
    int budget the window is ``budget - sinks`` >= 1; with a fraction, a row keeps at least sinks + 1 tokens (when it
    has seen that many), so the newest token always stays.
    """

    name = "StreamingLLM"

    def __init__(self, budget: int | float, sinks: int = 4):
        super().__init__(budget)
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an int >= 0, got {sinks!r}")
        if isinstance(self.budget, int) and self.budget <= sinks:
            raise ValueError(f"a budget of {self.budget} tokens leaves no recent window beside {sinks} sinks: "
                             f"pass a budget > sinks")
        self.sinks = sinks

    def keep_count(self, seen: torch.Tensor) -> torch.Tensor:
        return torch.maximum(super().keep_count(seen), torch.clamp(seen, max=self.sinks + 1))

    def scores(self, view: SlotView, keep: torch.Tensor) -> torch.Tensor:
        recency = view.positions.double()
        return recency.masked_fill(_rank(view.real) < self.sinks, math.inf)

    def describe(self) -> str:
        return f"StreamingLLM(budget={self.budget}, sinks={self.sinks})"


class TOVA(EvictionPolicy):
    """Token Omission Via Attention: keep the newest token and the tokens the call's last query attends to most.

    As kvpress's ``TOVAPress.score``: a slot's score is the last query's attention probability to it, averaged over
    all query heads (one score per layer, shared by its key/value heads); the newest token, the query's own, is
    always kept (kvpress pads its score with max + 1; the paper leaves it to the score, which is usually high).
    """

    needs_attention = True
    name = "TOVA"

    def scores(self, view: SlotView, keep: torch.Tensor) -> torch.Tensor:
        last_query = view.weights[:, :, -1, :].float().mean(dim=1)  # [B, K]
        return last_query.masked_fill(_age(view.real) == 0, math.inf)

    def describe(self) -> str:
        return f"TOVA(budget={self.budget}, newest_kept=True)"


class H2O(EvictionPolicy):
    """Heavy hitters and recent tokens: ceil(recent * kept) most recent, the rest by accumulated attention.

    ``recent`` in [0, 1]: the share of the kept tokens reserved for the most recent ones (the paper splits its
    budget evenly: 0.5); 1 is a sliding window, 0 heavy hitters alone.
    """

    needs_attention = True
    accumulates_attention = True
    name = "H2O"

    def __init__(self, budget: int | float, recent: float = 0.5):
        super().__init__(budget)
        if isinstance(recent, bool) or not isinstance(recent, (int, float)) or not 0 <= recent <= 1:
            raise ValueError(f"recent (the share of the budget for recent tokens) must lie in [0, 1], got {recent!r}")
        self.recent = float(recent)

    def scores(self, view: SlotView, keep: torch.Tensor) -> torch.Tensor:
        recent = torch.ceil(self.recent * keep.double() - 1e-9).long()  # [B]
        return view.mass.double().masked_fill(_age(view.real) < recent[:, None], math.inf)

    def describe(self) -> str:
        return f"H2O(budget={self.budget}, recent={self.recent})"


class SnapKV(EvictionPolicy):
    """Compress the prompt once: keep its last ``window`` tokens (the observation window) and the earlier tokens that
    the window's queries attend to most. Single-token calls evict nothing.

    As kvpress's ``SnapKVPress.score`` and ``ScorerPress.compress``, for each key/value head g and earlier token j:

        score[g, j] = mean over the query heads h of g's group of
                      avg_pool_kernel( mean over the window's queries q of attention[h, q, j] )[j]

    where the attention is the call's softmax over every key (the window's own included) and the pooling runs along
    the earlier tokens only, a ``kernel``-wide average padded with zeros at both ends (so a token next to the window
    does not borrow the window's weights); each head then keeps the window and its top-scoring earlier tokens.
    ``per_head=False`` selects once per layer instead: the same mean over all query heads, one set for all heads.

    The budget counts the window; an int budget must exceed it. A prompt within the budget is kept whole.
    """

    needs_attention = True
    name = "SnapKV"

    def __init__(self, budget: int | float, window: int = 32, kernel: int = 7, per_head: bool = True):
        super().__init__(budget)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window (the prompt's last queries that score the keys) must be an int >= 1, "
                             f"got {window!r}")
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"kernel must be an odd int >= 1 (the pooling keeps the key axis' length), got {kernel!r}")
        if isinstance(self.budget, int) and self.budget <= window:
            raise ValueError(f"a budget of {self.budget} tokens leaves nothing beside an observation window of "
                             f"{window}: pass a budget > window")
        if not isinstance(per_head, bool):
            raise ValueError(f"per_head must be a bool (True: a set per key/value head, False: per layer), "
                             f"got {per_head!r}")
        self.window, self.kernel, self.per_head = window, kernel, per_head

    def keep_count(self, seen: torch.Tensor) -> torch.Tensor:
        return torch.maximum(super().keep_count(seen), torch.clamp(seen, max=self.window))

    def keep(self, view: SlotView) -> torch.Tensor:
        if view.weights.shape[2] == 1:  # decoding: SnapKV compresses the prompt only
            return view.real
        return super().keep(view)

    def scores(self, view: SlotView, keep: torch.Tensor) -> torch.Tensor:
        observed = view.weights[:, :, -self.window:, :].float().mean(dim=2)  # [B, H, K]
        B, H, K = observed.shape
        if self.per_head:  # query head h reads key/value head h // (H / G): average within each group
            groups = view.real.shape[1]
            observed = observed.view(B, groups, H // groups, K).mean(dim=2)  # [B, G, K]
        else:
            observed = observed.mean(dim=1)  # [B, K]
        in_window = _age(view.real) < self.window
        earlier = observed.masked_fill(in_window | ~view.real, 0.0)  # pooled as kvpress pools: the earlier keys only
        pooled = F.avg_pool1d(earlier.reshape(-1, 1, K), self.kernel, stride=1, padding=self.kernel // 2)
        return pooled.view(earlier.shape).double().masked_fill(in_window, math.inf)

    def describe(self) -> str:
        selection = "per_head" if self.per_head else "per_layer"
        return f"SnapKV(budget={self.budget}, window={self.window}, kernel={self.kernel}, {selection})"
