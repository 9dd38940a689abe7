"""Dynamic Context Pruning (arXiv 2305.15805; docs/context-pruning.md): which earlier tokens stay visible.

Per layer, an interaction query/key pair of width r (shared by the layer's heads) scores every
earlier token j from the point of view of a later token n:

    s_nj = (Q_int_n . K_int_j) / sqrt(r) + beta            beta: a learned bias
    p_nj = alpha-sigmoid(s_nj)                              the alpha-entmax of [s, 0], first coordinate
    I_kj = prod_{n = j+1..k} p_nj                           token j is visible to k only if nobody dropped it

The cumulative product along the query axis makes dropping irreversible; a token never drops
itself (I_kk = 1). log I is added to the causal attention logits. alpha = 1 is the plain
sigmoid, alpha -> inf a step (binary decisions: what inference uses and what lets the KV cache
forget a token for good).

Beyond the paper, the bias can take a requested keep budget b through a learned non-negative
sensitivity, beta(b) = beta + softplus(raw) * logit(b), as the head gates do (bab.core.budget), so one
checkpoint can serve several context budgets.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bab.core.budget import budget_logit

HARD = math.inf  # alpha at inference: binary keep / drop decisions
BISECTION_STEPS = 24  # halvings of [0, 1]: float32 resolution


@dataclass(frozen=True)
class PruningConfig:
    r: int = 64  # width of the interaction query/key (the paper's default)
    irreversible: bool = True  # the cumulative product; False: only the current query decides (ablation)
    init_bias: float = 4.0  # beta at initialisation: sigmoid(4) = 0.98, so fine-tuning starts close to dense
    init_std: float = 0.02  # interaction weights start small, so s ~ beta at first (GPT-2's own init std)
    budget_conditioned: bool = False  # beta(b) = beta + softplus(raw) * logit(b)
    init_sensitivity: float = 1.0
    # The official code's propagate_in_depth: each layer also obeys the drops of the layers below it
    # (bab.context.decoder). Off by default: the paper's text and our GPT-2 runs have none.
    propagate_in_depth: bool = False
    # Bias terms in the interaction query/key projections. The official code has none (bias=False); ours did, and
    # the quick profile keeps them (its notebook shows the ablation against the official initial values).
    interaction_bias: bool = True

    @classmethod
    def official(cls, **overrides) -> PruningConfig:
        """The official code's initial values: the interaction bias starts at 5 (its model config's default;
        sigmoid(5) = 0.993) and the interaction query/key projections have no bias terms."""
        return cls(**{"init_bias": 5.0, "interaction_bias": False, **overrides})

    def __post_init__(self):
        # Checked here, before any module is built: a wrong type would otherwise surface deep inside nn.Linear or the
        # initialisers, or not at all (r = 2.5 rounds nowhere, init_std = -1 draws mirrored weights silently).
        if not _is_integer(self.r) or self.r < 1:
            raise ValueError(f"PruningConfig.r must be an int >= 1 (the interaction width, e.g. r=64); got {self.r!r}")
        for name in ("irreversible", "budget_conditioned", "propagate_in_depth", "interaction_bias"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"PruningConfig.{name} must be True or False, got {value!r}")
        if not _is_real(self.init_bias) or not math.isfinite(self.init_bias):
            raise ValueError(f"PruningConfig.init_bias must be a finite number (the initial interaction bias, e.g. "
                             f"4.0); got {self.init_bias!r}")
        for name, why in (("init_std", "the interaction weights' initial standard deviation, e.g. 0.02"),
                          ("init_sensitivity", "softplus cannot reach 0; e.g. 1.0")):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"PruningConfig.{name} must be a finite number > 0 ({why}); got {value!r}")


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def validate_alpha(alpha) -> float:
    alpha = float(alpha)
    if not alpha >= 1.0:  # also rejects NaN
        raise ValueError(f"alpha must be >= 1 (1: sigmoid, inf: hard step), got {alpha}")
    return alpha


class _AlphaSigmoidInBand(torch.autograd.Function):
    """alpha-entmax([s, 0])[0] for scores with |(alpha - 1) s| < 1, where 0 < p < 1.

    The two coordinates satisfy p^(alpha-1) - (1 - p)^(alpha-1) = (alpha - 1) s (the entmax
    optimality condition with both coordinates in the support), which is monotone in p, so we
    bisect on p itself: 24 halvings of [0, 1] reach float32 resolution. Gradient by the implicit
    function theorem: dp/ds = 1 / (p^(alpha-2) + (1 - p)^(alpha-2)).

    Why not ``entmax.entmax_bisect`` directly: it bisects on the threshold tau, and at alpha = 8
    p depends on tau through a 1/7-th power, so in float32 its 30-50 iterations leave errors up to
    0.03-0.05 in p near the band's edge (measured; tests/context/test_context_pruning.py compares this
    function with entmax_bisect run in float64 with 200 iterations).
    """

    @staticmethod
    def forward(ctx, scores, alpha):
        target = (alpha - 1) * scores
        lo, hi = torch.zeros_like(scores), torch.ones_like(scores)
        for _ in range(BISECTION_STEPS):
            mid = (lo + hi) / 2
            above = mid.pow(alpha - 1) - (1 - mid).pow(alpha - 1) > target
            hi = torch.where(above, mid, hi)
            lo = torch.where(above, lo, mid)
        p = (lo + hi) / 2
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        a = ctx.alpha
        return grad / (p.pow(a - 2) + (1 - p).pow(a - 2)), None


def alpha_sigmoid(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """p = alpha-entmax([s, 0])[0], elementwise; any shape. alpha = 1: sigmoid; alpha = inf: 1[s > 0]."""
    alpha = validate_alpha(alpha)
    if alpha == 1.0:
        return torch.sigmoid(scores)
    if math.isinf(alpha):
        return (scores > 0).to(scores.dtype)
    # Outside |(alpha - 1) s| < 1 the alpha-entmax of [s, 0] is exactly 1[s > 0] (zero gradient): only the
    # scores inside that band need the bisection, which saves most of the work once alpha has grown.
    band = (scores.detach() * (alpha - 1)).abs() < 1
    hard = ((scores.detach() > 0) & ~band).to(scores.dtype)
    return hard.masked_scatter(band, _AlphaSigmoidInBand.apply(scores[band], alpha))


def log_alpha_sigmoid(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """log p; log 0 is -inf in hard mode and log(float32 tiny) ~ -87 in soft mode (finite gradients)."""
    alpha = validate_alpha(alpha)
    if alpha == 1.0:
        return F.logsigmoid(scores)
    p = alpha_sigmoid(scores, alpha)
    if math.isinf(alpha):
        return torch.log(p)  # exactly 0 or -inf; no gradient is taken in hard mode
    return torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))


def cosine_alpha(step: int, total_steps: int, start: float = 1.0, end: float = 8.0) -> float:
    """alpha on a cosine schedule from ``start`` (step 0) to ``end`` (last step), as in the paper."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    t = min(max(step / max(total_steps - 1, 1), 0.0), 1.0)
    return start + (end - start) * (1 - math.cos(math.pi * t)) / 2


class ContextInteraction(nn.Module):
    """The interaction query/key of one layer and its bias."""

    def __init__(self, d_model: int, config: PruningConfig):
        super().__init__()
        self.config = config
        self.r = config.r
        self.query = nn.Linear(d_model, config.r, bias=config.interaction_bias)
        self.key = nn.Linear(d_model, config.r, bias=config.interaction_bias)
        for linear in (self.query, self.key):
            nn.init.normal_(linear.weight, std=config.init_std)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)
        self.bias = nn.Parameter(torch.tensor(float(config.init_bias)))
        if config.budget_conditioned:
            raw = math.log(math.expm1(config.init_sensitivity))  # inverse softplus
            self.raw_sensitivity = nn.Parameter(torch.tensor(raw))

    @property
    def sensitivity(self) -> torch.Tensor | None:
        return F.softplus(self.raw_sensitivity) if self.config.budget_conditioned else None

    def bias_for(self, budget: float | None) -> torch.Tensor:
        """beta, or beta(b) = beta + softplus(raw) * logit(b) for the budget-conditioned variant."""
        if not self.config.budget_conditioned:
            if budget is not None:
                raise ValueError("this model is not budget-conditioned; pass budget=None (the keep rate is set by "
                                 "the gamma it was fine-tuned with)")
            return self.bias
        if budget is None:
            raise ValueError("a budget-conditioned model needs budget=<fraction of context to keep, in (0, 1]>")
        return self.bias + self.sensitivity * budget_logit(budget)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q_int [B, T, r] (float32 at least) and k_int [B, T, r] (the module's dtype) of x [B, T, d], computed in
        float32 at least whatever the model's dtype: keep / drop decisions are thresholds at 0, and in bfloat16 a
        score near 0 rounds differently in the full forward and the cached steps (other shapes, other roundings),
        so the two would drop different tokens. A float32 model computes exactly what ``self.query(x)`` computes
        (every cast is then the tensor itself)."""
        # k_int is rounded once to the module's own dtype: a PrunedCache stores it at that size, and the full forward
        # scores with the same rounded keys, so both paths still compare the same numbers with 0
        return _linear32(self.query, x), _linear32(self.key, x).to(self.key.weight.dtype)

    def scores(self, q_int: torch.Tensor, k_int: torch.Tensor, budget: float | None) -> torch.Tensor:
        """s [B, Tq, Tk] in float32 (at least) from q_int [B, Tq, r] and k_int [B, Tk, r] (the 1/sqrt(r) applied to
        the small q_int)."""
        return (_wide(q_int) / math.sqrt(self.r)) @ _wide(k_int).transpose(1, 2) + _wide(self.bias_for(budget))

    def log_keep(self, x: torch.Tensor, alpha: float, budget: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        """log I [B, T, T] (query k, key j; 0 on and above the diagonal) and k_int [B, T, r] for x [B, T, d], both
        float32 at least (``project``)."""
        q_int, k_int = self.project(x)
        scores = self.scores(q_int, k_int, budget)  # [B, n, j]
        T = x.shape[1]
        below = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-1)  # n > j: n may drop j
        if math.isinf(validate_alpha(alpha)):
            # Hard decisions without float logs or a cumulative sum: j is dead for every k at or after the
            # first n > j that drops it (the cumulative product of 0/1 decisions).
            dropped = (scores <= 0) & below
            if self.config.irreversible:
                first = dropped.to(torch.uint8).argmax(dim=1)  # [B, j]: first n that drops j (0 if none)
                first = torch.where(dropped.any(dim=1), first, torch.full_like(first, T))
                dropped = torch.arange(T, device=x.device)[None, :, None] >= first[:, None, :]
            return torch.zeros_like(scores).masked_fill_(dropped, -math.inf), k_int
        log_p = log_alpha_sigmoid(scores, alpha)
        log_p = torch.where(below, log_p, torch.zeros((), dtype=log_p.dtype, device=log_p.device))
        if self.config.irreversible:
            return torch.cumsum(log_p, dim=1), k_int  # sum over n = j+1..k of log p_nj
        return log_p, k_int


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in float32 at least (bfloat16, float16 -> float32; float32 and float64 as they are)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _linear32(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    bias = None if linear.bias is None else _wide(linear.bias)
    return F.linear(_wide(x), _wide(linear.weight), bias)


def keep_mass(log_keep: torch.Tensor) -> torch.Tensor:
    """Mean of I over the strictly causal pairs k > j (the paper's sparsity regulariser, one layer)."""
    T = log_keep.shape[-1]
    if T < 2:
        return log_keep.new_ones(())
    below = torch.ones(T, T, dtype=torch.bool, device=log_keep.device).tril(-1)
    return log_keep.exp()[..., below].mean()


# How the sparsity regulariser averages I, which sets what a given gamma means:
# - "causal_pairs": the mean over the strictly causal pairs k > j, the fraction of context kept (the paper's text);
# - "official": the official code's mean over every entry of the query rows but the last, I[..., :-1, :], the
#   constant-1 diagonal and upper triangle included. Each causal pair outside the last row weighs 1 / (T (T - 1))
#   there and 2 / (T (T - 1)) here, at every T: gamma under "official" equals gamma / 2 under "causal_pairs" per
#   pair (the last query row aside, which "official" leaves out; docs/context-pruning.md).
SPARSITY_NORMALISATIONS = ("causal_pairs", "official")


def sparsity_term(log_keep: torch.Tensor, normalisation: str = "causal_pairs") -> torch.Tensor:
    """The sparsity regulariser of one layer from its log I [..., T, T] (0 on and above the diagonal)."""
    if normalisation == "causal_pairs":
        return keep_mass(log_keep)
    if normalisation == "official":
        if log_keep.shape[-1] < 2:
            return log_keep.new_ones(())
        return log_keep[..., :-1, :].exp().mean()
    raise ValueError(f"sparsity normalisation must be one of {SPARSITY_NORMALISATIONS}, got {normalisation!r}")


def drop_times(log_keep: torch.Tensor) -> torch.Tensor:
    """For hard log I [B, T, T]: the query index k at which each token j was dropped, or -1 if it never was.

    Returns [B, T] (long). Because dropping is irreversible, j is alive for queries j..k-1 and dead after.
    """
    T = log_keep.shape[-1]
    alive = (log_keep > -math.inf) & torch.ones(T, T, dtype=torch.bool, device=log_keep.device).tril()
    alive_count = alive.sum(dim=1)  # [B, j]: queries k >= j that still see j (includes j itself)
    positions = torch.arange(T, device=log_keep.device)
    dropped_at = positions + alive_count  # first query that no longer sees j
    return torch.where(dropped_at < T, dropped_at, torch.full_like(dropped_at, -1))
