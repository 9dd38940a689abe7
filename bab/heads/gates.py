"""Head gates for Budgeted Attention Allocation (Eq. 1-4 of the budgeted-attention paper; docs/budgeted-heads.md).

Pure torch; knows nothing about any model. A gate module maps a requested budget b in (0, 1]
to a tensor of gate values of shape [num_layers, num_heads]. Everything that turns gates into
masks (top-k, per-layer floor, straight-through) is a plain function of that tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bab.core.budget import DEFAULT_EPS, budget_logit, validate_budget

# How budget-conditioned gates start, before training (every method with head gates takes one of these):
# - "flat": as the model builds them, every head alike (the same slope, near-equal thresholds): the paper's start.
#   With g(b) the same for every head, the soft cost is met by shrinking all heads alike.
# - "random", "ablation", "elimination": nested (``nest_gates_by_importance_``), the heads opening one after another
#   in the order of a random permutation, of one-at-a-time ablation importance (``head_ablation_importance``) or of
#   greedy backward elimination (``head_elimination_importance``), scored on the starting model.
GATE_STARTS = ("flat", "random", "ablation", "elimination")

class BudgetGates(nn.Module):
    """Budget-conditioned gates (Eq. 1): g_lh(b) = sigmoid((theta_lh + alpha_lh * logit(b)) / T).

    alpha_lh = softplus(raw) >= 0, so every gate is monotone non-decreasing in b.
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        temperature: float = 1.0,
        eps: float = DEFAULT_EPS,
        init_logit: float = 0.0,
        init_sensitivity: float = 1.0,
    ):
        super().__init__()
        _check_shape(num_layers, num_heads)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not 0 < eps < 0.5:
            raise ValueError(f"eps must lie in (0, 0.5), got {eps}")
        if init_sensitivity <= 0:
            raise ValueError(f"init_sensitivity must be > 0 (softplus cannot reach 0), got {init_sensitivity}")
        self.temperature = float(temperature)
        self.eps = float(eps)
        # Small jitter breaks the tie between heads so top-k is well defined from step 0.
        jitter = 0.01 * torch.randn(num_layers, num_heads)
        self.theta = nn.Parameter(torch.full((num_layers, num_heads), float(init_logit)) + jitter)
        # inverse softplus so that softplus(raw) == init_sensitivity at initialisation
        raw = math.log(math.expm1(init_sensitivity))
        self.raw_sensitivity = nn.Parameter(torch.full((num_layers, num_heads), raw))

    @property
    def sensitivity(self) -> torch.Tensor:
        return F.softplus(self.raw_sensitivity)

    def forward(self, budget: float) -> torch.Tensor:
        z = budget_logit(budget, self.eps)
        return torch.sigmoid((self.theta + self.sensitivity * z) / self.temperature)


def nest_gates_by_importance_(gates: BudgetGates | StaticGates, importance: torch.Tensor, sharpness: float = 4.0,
                              budget: float | None = None) -> None:
    """Initialise ``gates`` (in place) so the heads open one after another in order of ``importance``.

    With every head's gate at g_h(b) = 1/2 and the same slope at the start, the soft cost is met by shrinking
    all heads alike and the hard top-k then picks almost at random (the flat-gate diagnosis). Here head h, of
    importance rank r_h (0 = most important) among N = L * H heads, opens at budget b_h = (r_h + 1/2) / N:

        sensitivity = sharpness * T,   theta_h = -sharpness * T * logit(b_h)

    so g_h(b) = sigmoid(sharpness * (logit(b) - logit(b_h))) crosses 1/2 at b_h. At budget b about b * N gates
    are open (the soft cost starts near b) and, since every head has the same slope, the ranking of the gates,
    and so the hard top-k set, is the importance order at every budget: the kept sets are nested
    (the set at 0.25 is inside the set at 0.5). Training then moves theta and the slopes from there.
    ``importance`` [L, H]: larger = more important (e.g. ``head_ablation_importance``); ties by position.

    ``StaticGates`` (one specialist, no budget input) get the nested gates' values at their own ``budget``:
    theta_h = sharpness * T * (logit(b) - logit(b_h)), so the specialist starts from the same heads.
    """
    if tuple(importance.shape) != tuple(gates.theta.shape):
        raise ValueError(f"importance must have the gates' shape {tuple(gates.theta.shape)} (layers x heads), "
                         f"got {tuple(importance.shape)}")
    if not torch.isfinite(importance).all():
        raise ValueError("importance has NaN or infinite entries; compute it on a batch where the loss is finite")
    if sharpness <= 0:
        raise ValueError(f"sharpness must be > 0 (the gates' slope in logit(b)), got {sharpness}")
    n = importance.numel()
    order = torch.argsort(importance.detach().flatten().double(), descending=True, stable=True)
    rank = torch.empty(n, dtype=torch.float64)
    rank[order] = torch.arange(n, dtype=torch.float64)
    opens_at = (rank + 0.5) / n
    scale = sharpness * gates.temperature
    with torch.no_grad():
        if isinstance(gates, StaticGates):
            if budget is None:
                raise ValueError("static gates serve one budget: pass budget=<the specialist's budget>")
            gates.theta.copy_((scale * (budget_logit(budget) - torch.logit(opens_at))).view_as(gates.theta))
            return
        gates.theta.copy_((-scale * torch.logit(opens_at)).view_as(gates.theta))
        gates.raw_sensitivity.fill_(math.log(math.expm1(scale)))


def head_ablation_importance(loss_with_mask, num_layers: int, num_heads: int) -> torch.Tensor:
    """Importance of every head as the loss increase when that head alone is masked (Michel et al., 2019,
    "Are sixteen heads really better than one?"): [L, H] = loss(all but (l, h)) - loss(all).

    ``loss_with_mask``: a callable taking a binary head mask [L, H] and returning the model's mean loss (a
    float) on a fixed batch; the caller decides model, data and loss. Costs L * H + 1 evaluations.
    """
    _check_shape(num_layers, num_heads)
    full = torch.ones(num_layers, num_heads)
    base = float(loss_with_mask(full))
    importance = torch.empty(num_layers, num_heads)
    for layer in range(num_layers):
        for head in range(num_heads):
            mask = full.clone()
            mask[layer, head] = 0.0
            importance[layer, head] = float(loss_with_mask(mask)) - base
    return importance


def head_elimination_importance(loss_with_mask, num_layers: int, num_heads: int) -> torch.Tensor:
    """Importance of every head as the step at which greedy backward elimination removes it: starting from
    all heads, repeatedly mask the head whose removal raises the loss least, given the heads already
    masked. [L, H] with values 0 (removed first) ... L * H - 1 (kept longest): larger = more important.

    Unlike one-at-a-time ablation (``head_ablation_importance``) each step sees the heads already gone, so
    the order suits every budget (the heads kept at 0.25 are the best set that elimination found there,
    not the 25% that mattered most in the full model). ``loss_with_mask`` as for
    ``head_ablation_importance``; costs about (L * H)^2 / 2 evaluations.
    """
    _check_shape(num_layers, num_heads)
    mask = torch.ones(num_layers, num_heads)
    importance = torch.empty(num_layers, num_heads)
    for step in range(num_layers * num_heads - 1):
        losses = {}
        for layer, head in mask.nonzero().tolist():
            trial = mask.clone()
            trial[layer, head] = 0.0
            losses[(layer, head)] = float(loss_with_mask(trial))
        layer, head = min(losses, key=losses.get)  # ties: the first in layer-major order
        mask[layer, head] = 0.0
        importance[layer, head] = step
    importance[mask.bool()] = num_layers * num_heads - 1  # the last head standing
    return importance


class StaticGates(nn.Module):
    """Gates without the budget input, trained for one fixed budget (one specialist per budget)."""

    def __init__(self, num_layers: int, num_heads: int, temperature: float = 1.0, init_logit: float = 0.0):
        super().__init__()
        _check_shape(num_layers, num_heads)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        jitter = 0.01 * torch.randn(num_layers, num_heads)
        self.theta = nn.Parameter(torch.full((num_layers, num_heads), float(init_logit)) + jitter)

    def forward(self, budget: float | None = None) -> torch.Tensor:
        if budget is not None:
            validate_budget(budget)  # accepted for a uniform interface, but ignored
        return torch.sigmoid(self.theta / self.temperature)


def estimated_cost(gates: torch.Tensor) -> torch.Tensor:
    """Eq. 3: mean gate mass over all layers and heads."""
    return gates.mean()


def attention_cost(weights: torch.Tensor | None, mode: str, device=None) -> torch.Tensor:
    """Estimated attention cost of a forward pass: 1 when dense, the mean gate mass (Eq. 3) when soft,
    the kept fraction k / (L*H) of a binary mask otherwise (rounded first: straight-through adds
    g - g, which is not exactly 0 in floating point)."""
    if weights is None:
        return torch.ones((), device=device)
    if mode == "soft":
        return estimated_cost(weights)
    return weights.detach().round().mean()


def num_heads_to_keep(budget: float, total_heads: int) -> int:
    """k = ceil(b * L * H) (Eq. 4). Rounded first so 0.3 * 10 keeps 3 heads, not 4."""
    budget = validate_budget(budget)
    return max(1, math.ceil(round(budget * total_heads, 9)))


def hard_topk_mask(gates: torch.Tensor, budget: float) -> torch.Tensor:
    """Global top-k (Eq. 4): keep the k largest gates over all layers; may empty a layer."""
    k = num_heads_to_keep(budget, gates.numel())
    flat = gates.detach().flatten()
    mask = torch.zeros_like(flat)
    mask[torch.topk(flat, k).indices] = 1.0
    return mask.view_as(gates)


def hard_topk_mask_with_floor(gates: torch.Tensor, budget: float, min_per_layer: int = 1) -> torch.Tensor:
    """Top-k that keeps at least ``min_per_layer`` heads in every layer (what structural pruning needs).

    The best ``min_per_layer`` heads of each layer are taken first, the remaining k - floor
    slots go to the largest gates left. Keeps exactly max(k, L * min_per_layer) heads.
    """
    num_layers, num_heads = gates.shape
    if not 1 <= min_per_layer <= num_heads:
        raise ValueError(f"min_per_layer must lie in [1, {num_heads}], got {min_per_layer}")
    k = num_heads_to_keep(budget, gates.numel())
    scores = gates.detach()
    mask = torch.zeros_like(scores)
    floor_idx = torch.topk(scores, min_per_layer, dim=1).indices
    mask.scatter_(1, floor_idx, 1.0)
    remaining = k - int(mask.sum())
    if remaining > 0:
        rest = scores.masked_fill(mask.bool(), float("-inf")).flatten()
        mask.view(-1)[torch.topk(rest, remaining).indices] = 1.0
    return mask


def make_gates(kind: str | None, num_layers: int, num_heads: int, temperature: float = 1.0,
               init_logit: float = 0.0) -> nn.Module | None:
    """The gate module a model config asks for: "budget" (Eq. 1), "static", or None (no gates)."""
    if kind == "budget":
        return BudgetGates(num_layers, num_heads, temperature, init_logit=init_logit)
    if kind == "static":
        return StaticGates(num_layers, num_heads, temperature, init_logit=init_logit)
    if kind is None:
        return None
    raise ValueError(f"gates must be None, 'budget' or 'static', got {kind!r}")


def topk_head_mask(gates: nn.Module | None, budget: float, min_per_layer: int = 0) -> torch.Tensor:
    """The binary [L, H] hard-mode mask at ``budget``: global top-k, or with a per-layer floor."""
    soft = soft_gates_of(gates, validate_budget(budget))
    if min_per_layer:
        return hard_topk_mask_with_floor(soft, budget, min_per_layer)
    return hard_topk_mask(soft, budget)


def soft_gates_of(gates: nn.Module | None, budget: float) -> torch.Tensor:
    """``gates(budget)`` [L, H], or a clear error for a model built without gates."""
    if gates is None:
        raise ValueError("this model has no gates (its config has gates=None); build it with gates='budget' "
                         "or 'static', or pass an explicit head_mask")
    return gates(budget)


def head_weights(gates: nn.Module | None, budget, mode: str, head_mask: torch.Tensor | None,
                 shape: tuple[int, int], dtype: torch.dtype, min_per_layer: int = 0):
    """What multiplies each head in ``mode``: (weights [L, H] or None, soft gates [L, H] or None).

    ``dense``: nothing. ``soft``: the gates g(b) (Eq. 2). ``hard``: the global top-k mask with a
    straight-through gradient to the gates (Eq. 4). ``skip``: the same mask, detached (inference).
    ``min_per_layer`` >= 1 keeps that many heads in every layer (``hard_topk_mask_with_floor``), the
    mask structural pruning materialises. An explicit binary ``head_mask`` [L, H] replaces the top-k
    in hard and skip mode. The caller checks that ``mode`` is one it supports.
    """
    if mode == "dense":
        return None, None
    if head_mask is not None:
        if mode == "soft":
            raise ValueError("head_mask is a hard mask: use it with mode='hard' (or 'skip')")
        if tuple(head_mask.shape) != tuple(shape):
            raise ValueError(f"head_mask must have shape {tuple(shape)}, got {tuple(head_mask.shape)}")
        if not torch.all((head_mask == 0) | (head_mask == 1)):
            raise ValueError("head_mask must be binary (0 or 1 per head)")
        return head_mask.to(dtype), None
    if budget is None:
        raise ValueError(f"mode={mode!r} needs a budget in (0, 1] (or an explicit head_mask)")
    budget = validate_budget(budget)
    soft = soft_gates_of(gates, budget)
    if mode == "soft":
        return soft, soft
    hard = hard_topk_mask_with_floor(soft, budget, min_per_layer) if min_per_layer else hard_topk_mask(soft, budget)
    if mode == "skip":
        return hard, soft.detach()
    return straight_through(hard, soft), soft  # "hard": forward is binary, gradient is soft


def scale_heads(heads: torch.Tensor, weights: torch.Tensor, head_axis: int) -> torch.Tensor:
    """Each head times its weight (Eq. 2: o_lh = g_lh(b) * head_lh(x)): the one place a head meets its gate.

    ``heads``: one layer's head outputs in any layout whose n heads lie along ``head_axis`` (>= 0), e.g.
    [B, n, T, Dh] (bab's encoder) or [B, T, n, Dh] (transformers' output-projection input, split per head);
    ``weights`` [n] (a row of ``head_weights``). Returns the same shape.
    """
    return heads * weights.view(-1, *([1] * (heads.dim() - 1 - head_axis)))


def straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Forward value of ``hard``, gradient of ``soft``: m = m_hard + g - stopgrad(g)."""
    return hard + soft - soft.detach()


def _check_shape(num_layers: int, num_heads: int) -> None:
    if num_layers < 1 or num_heads < 1:
        raise ValueError(f"need at least one layer and one head, got {num_layers} x {num_heads}")
