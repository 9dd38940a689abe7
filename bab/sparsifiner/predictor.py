"""Sparsifiner (CVPR 2023, Eq. 1-6; docs/sparsifiner.md): learned sparse connectivity for MHSA.

Per layer and head a low-rank connectivity predictor proposes, for every query, which keys it may
attend to; attention is then computed over those keys only. Per example b and head h, with q, k [n, d]:

    K_down   = W_down[h] K                           [n_down, d]     W_down[h]: [n_down, n] (token axis)
    A_down   = softmax(Q K_down^T * scale)           [n, n_down]     (Eq. 1; scale = 1/sqrt(d))
    A~_down  = A_down * 1[A_down > tau]              sparse coefficients (Eq. 2)
    W~_up    = W_up[h] * 1[|W_up[h]| >= up_prune]    sparse basis [n_down, n]
    S        = A~_down W~_up                         [n, n] connectivity scores
    M        = top-k of S per query, k = ceil(keep_rate * n)   (Eq. 3)
    out_i    = softmax_{j in M_i}(q_i k_j / sqrt(d)) V_{M_i}   (Eq. 4-6)

After token pruning every example has its own surviving tokens: ``positions`` [B, n] selects example b's
columns of W_down[h] and W_up[h]. Nothing in the predictor mixes heads or examples.

Each choice where the official code (github.com/lim142857/Sparsifiner, ``MaskPredictor``) differs from the paper's
text is an option of ``ConnectivityConfig`` (its fields say what each does; the defaults are the paper's text as we
read it, ``ConnectivityConfig.official()`` turns every official choice on); docs/sparsifiner.md, "Paper text vs
official code vs ours", compares them side by side.

Two implementations of the last line, which must agree numerically: ``masked_dense_attention``, the reference (and
what the official code does: the full n x n scores, entries outside M at -inf; saves FLOPs on paper only), and
``gathered_sparse_attention``, whose work really is proportional to n * k (plus the gather).

Exactly k per query, as the official code keeps (the paper's text may keep fewer), so every query has the same
number of keys and the sparse kernels use one [n, k] layout. The ranking rule: the k largest S; among keys tied at
the k-th place, the largest T = A_down W~_up; then the lower token index (``ConnectivityPredictor.connections``;
docs/sparsifiner.md, "Exactly k, and how ties break"). The
fused C++ kernel (``bab.sparsifiner.fused``) computes the same scores with the same additions in the same order
(``ranking_scores``), so the two paths keep the same sets bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn

from bab.core.budget import validate_fraction
from bab.sparsifiner.kernels import index_to_mask


def validate_keep_rate(keep_rate) -> float:
    """Return ``keep_rate`` as a float in (0, 1], or raise an error that says what was wrong and how to fix it."""
    return validate_fraction(keep_rate, "keep_rate", "the fraction of key connections each query keeps",
                             "use 1.0 for full attention and e.g. 0.1 to keep 10% of the connections "
                             "(at least one is always kept)")


def num_connections(keep_rate, num_tokens: int) -> int:
    """k = ceil(keep_rate * n), at least 1 (the paper's budget B). Rounded first so 0.3 * 10 is 3, not 4."""
    keep_rate = validate_keep_rate(keep_rate)
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    return max(1, min(num_tokens, math.ceil(round(keep_rate * num_tokens, 9))))


COEFFICIENT_RULES = ("threshold", "topm")  # Eq. 2's tau (the paper) or the top_m largest (the official default)
PREDICTOR_SCALES = ("head_dim", "num_heads")  # A_down's logits times 1/sqrt(d) (Eq. 1) or 1/sqrt(H) (official)
BASES = ("per_head", "shared")  # one W_down / W_up pair per head (the paper's figure, ours) or per layer (official)
PHASE1_SCORES = ("sparse", "raw")  # phase 1 distils A~_down W~_up (ours) or A_down W_up (official)


@dataclass(frozen=True)
class ConnectivityConfig:
    """The settings of one layer's connectivity predictor, validated when built. The defaults are the paper's text
    as we read it (docs/sparsifiner.md, "Paper text vs official code vs ours"); ``official()`` is the official
    code's ``MaskPredictor`` with its default config. The fields are ``ConnectivityPredictor``'s keyword arguments;
    ``ViTClassifierConfig(connectivity=...)``, Sparsifiner's recipe and notebook 05's profiles nest one."""

    n_down: int = 32  # rank of the low-rank attention (the paper's 32)
    tau: float = 0.05  # Eq. 2's threshold on A_down
    up_prune: float = 1e-2  # basis entries with |w| below this are pruned (the paper's 1e-2)
    cls_dense: bool = False  # no prediction for the CLS query, it attends to every key (official)
    coefficients: str = "threshold"  # "threshold": A_down > tau (Eq. 2); "topm": the top_m largest (official)
    top_m: int = 8  # coefficients kept per query with coefficients="topm" (official: 8)
    basis_threshold_abs: bool = False  # basis |W_up| * 1[|W_up| >= up_prune] (official), else W_up * 1[...]
    predictor_scale: str = "head_dim"  # A_down's logits times 1/sqrt(d) or 1/sqrt(num_heads) (official)
    basis: str = "per_head"  # one W_down / W_up per head, or "shared" by the heads of a layer (official)
    connectivity_projections: bool = False  # learned d -> d/2 maps of q and k before A_down (official)
    phase1_scores: str = "sparse"  # what phase 1 distils: A~_down W~_up, or "raw" A_down W_up (official)

    def __post_init__(self):
        """Raise an error that says how to fix any bad setting."""
        n_down, top_m, coefficients = self.n_down, self.top_m, self.coefficients
        if isinstance(n_down, bool) or not isinstance(n_down, int) or n_down < 1:
            raise ValueError(f"n_down (the rank of the low-rank attention) must be an integer >= 1, got {n_down!r}")
        if not 0.0 <= self.tau < 1.0:
            raise ValueError(f"tau (threshold on the softmax coefficients) must lie in [0, 1), got {self.tau}")
        if self.up_prune < 0:
            raise ValueError(f"up_prune must be >= 0 (0 prunes nothing), got {self.up_prune}")
        for name in ("cls_dense", "basis_threshold_abs", "connectivity_projections"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if coefficients not in COEFFICIENT_RULES:
            raise ValueError(f"coefficients must be one of {COEFFICIENT_RULES}: 'threshold' zeroes A_down <= tau "
                             f"(the paper's Eq. 2), 'topm' keeps the top_m largest per query (the official code); "
                             f"got {coefficients!r}")
        if coefficients == "topm" and (isinstance(top_m, bool) or not isinstance(top_m, int)
                                       or not 1 <= top_m <= n_down):
            raise ValueError(f"top_m must be an integer in [1, n_down = {n_down}] with coefficients='topm', got "
                             f"{top_m!r}; lower top_m or raise n_down (the official code keeps 8 of 32)")
        if self.predictor_scale not in PREDICTOR_SCALES:
            raise ValueError(f"predictor_scale must be one of {PREDICTOR_SCALES}: 'head_dim' scales A_down's logits "
                             f"by 1/sqrt(d) (Eq. 1), 'num_heads' by 1/sqrt(num_heads) (the official code); "
                             f"got {self.predictor_scale!r}")
        if self.basis not in BASES:
            raise ValueError(f"basis must be one of {BASES}: 'per_head' gives every head its own W_down and W_up "
                             f"(ours), 'shared' one pair per layer for all heads (the official code); got "
                             f"{self.basis!r}")
        if self.phase1_scores not in PHASE1_SCORES:
            raise ValueError(f"phase1_scores must be one of {PHASE1_SCORES}: 'sparse' distils A~_down W~_up in "
                             f"phase 1 (ours), 'raw' the unthresholded A_down times the signed, unpruned W_up (the "
                             f"official code); got {self.phase1_scores!r}")

    @classmethod
    def official(cls, **overrides) -> ConnectivityConfig:
        """The official code's predictor (github.com/lim142857/Sparsifiner, ``src/models/sparsifiner.py``
        ``MaskPredictor``; thresholds from ``sparsifiner_default_config.yaml``): CLS dense, the top 8
        coefficients, |W_up| pruned at 2e-2, logits times 1/sqrt(num_heads), one basis per layer, the
        ``proj_c_q`` / ``proj_c_k`` maps and phase 1 on A_down W_up. n_down = 32 (official: N // 6 = 32 at
        N = 197) and tau = 0.05 (the config's, unused with top-m). ``overrides``: any field, e.g.
        ``ConnectivityConfig.official(n_down=8, top_m=2)`` for a 50-token model."""
        official = dict(n_down=32, tau=0.05, up_prune=2e-2, cls_dense=True, coefficients="topm", top_m=8,
                        basis_threshold_abs=True, predictor_scale="num_heads", basis="shared",
                        connectivity_projections=True, phase1_scores="raw")
        unknown = sorted(set(overrides) - set(official))
        if unknown:
            raise TypeError(f"ConnectivityConfig.official() got unknown fields {unknown}; the fields are "
                            f"{sorted(official)}")
        return cls(**{**official, **overrides})

    def replace(self, **changes) -> ConnectivityConfig:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)

    def build(self, num_heads: int, max_tokens: int, head_dim: int | None = None) -> ConnectivityPredictor:
        """The predictor of one layer with these settings; ``head_dim`` (d) is needed with
        ``connectivity_projections``."""
        return ConnectivityPredictor(num_heads, max_tokens, head_dim=head_dim, **asdict(self))


class ConnectivityPredictor(nn.Module):
    """The low-rank connectivity predictor of one layer: one W_down and one W_up per head (or, with
    ``basis="shared"``, one pair for all heads).

    ``max_tokens`` is the token count the projections are built for (n); a shorter sequence (after
    token pruning) uses the columns of its tokens' original positions, as a learned projection over
    positions has to. ``options`` are ``ConnectivityConfig``'s fields (described there and in the module
    docstring; the defaults follow the paper's text). ``head_dim`` (d) is needed with ``connectivity_projections``
    only.
    """

    def __init__(self, num_heads: int, max_tokens: int, *, head_dim: int | None = None, **options):
        super().__init__()
        if max_tokens < 1 or num_heads < 1:
            raise ValueError(f"num_heads and max_tokens must be >= 1, got {num_heads} and {max_tokens}")
        config = ConnectivityConfig(**options)  # validates them
        n_down, basis = config.n_down, config.basis
        self.n_down, self.tau, self.up_prune = n_down, float(config.tau), float(config.up_prune)
        self.cls_dense, self.coefficient_rule, self.top_m = config.cls_dense, config.coefficients, config.top_m
        self.basis_threshold_abs, self.predictor_scale = config.basis_threshold_abs, config.predictor_scale
        self.basis, self.phase1_scores = basis, config.phase1_scores
        self._num_heads = num_heads
        # per_head: [H, n_down, max_tokens]; shared: [1, n_down, max_tokens], which broadcasts over the heads. The
        # per-head draws are the ones this predictor always made, in the same order.
        groups = num_heads if basis == "per_head" else 1
        self.w_down = nn.Parameter(torch.randn(groups, n_down, max_tokens) / math.sqrt(max_tokens))
        # W_up starts non-negative around the mean attention weight 1/n; attention distillation and weight decay
        # (the paper's L2 term) then decide which basis weights fall under the prune threshold.
        self.w_up = nn.Parameter(torch.rand(groups, n_down, max_tokens) * 2.5 / max_tokens)
        self.proj_c_q = self.proj_c_k = None
        if config.connectivity_projections:
            if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2:
                raise ValueError(f"connectivity_projections map q and k from head_dim d to d // 2, so they need "
                                 f"head_dim=<d >= 2>; got head_dim={head_dim!r}")
            # the official MaskPredictor's nn.Linear(head_dim, head_dim // reduce_c_factor = 2), bias included,
            # one pair per layer applied to every head; initialised as its model's _init_weights does every
            # nn.Linear: truncated normal with std 0.02, bias 0
            self.proj_c_q, self.proj_c_k = nn.Linear(head_dim, head_dim // 2), nn.Linear(head_dim, head_dim // 2)
            for linear in (self.proj_c_q, self.proj_c_k):
                nn.init.trunc_normal_(linear.weight, std=0.02)
                nn.init.zeros_(linear.bias)

    @property
    def num_heads(self) -> int:
        return self._num_heads

    @property
    def connectivity_projections(self) -> bool:
        return self.proj_c_q is not None

    @property
    def config(self) -> ConnectivityConfig:
        """This predictor's settings."""
        return ConnectivityConfig(self.n_down, self.tau, self.up_prune, self.cls_dense, self.coefficient_rule,
                                  self.top_m, self.basis_threshold_abs, self.predictor_scale, self.basis,
                                  self.connectivity_projections, self.phase1_scores)

    @property
    def first_query(self) -> int:
        """The first query row the predictor predicts: 1 when the CLS query attends densely, else 0."""
        return 1 if self.cls_dense else 0

    def _columns(self, w: torch.Tensor, n: int, positions: torch.Tensor | None) -> torch.Tensor:
        """w [G, n_down, max_tokens] -> the columns of the current tokens: [G, n_down, n] (shared by the batch)
        or, with ``positions`` [B, n] (each example's original token positions after pruning), [B, G, n_down, n].
        G = H, or 1 with ``basis="shared"`` (it then broadcasts over the heads)."""
        if positions is None:
            return w[..., :n]
        return w[:, :, positions].permute(2, 0, 1, 3)  # [H, n_down, B, n] -> [B, H, n_down, n]

    def logit_scale(self, head_dim: int) -> float:
        """The factor on Q K_down^T in Eq. 1: 1/sqrt(d) ("head_dim", d the width of the vectors multiplied: d // 2
        after the connectivity projections) or 1/sqrt(num_heads) ("num_heads")."""
        return 1.0 / math.sqrt(head_dim if self.predictor_scale == "head_dim" else self.num_heads)

    def project_queries_keys(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The predictor's own Q and K: q, k [B, H, n, d] as they are, or with ``connectivity_projections``
        q P_q^T + b_q and k P_k^T + b_k [B, H, n, d // 2] (the same maps for every head)."""
        if self.proj_c_q is None:
            return q, k
        return self.proj_c_q(q), self.proj_c_k(k)

    def down_projected_keys(self, k: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """K_down = W_down K per example and head: k [B, H, n, c] (the predictor's keys, after any projection)
        -> [B, H, n_down, c].

        Head h uses its own W_down[h] (or the layer's one W_down with ``basis="shared"``) and example b its own
        columns (``positions[b]``): the matmul broadcasts W_down [G, n_down, n] (or [B, G, n_down, n], G = H or 1)
        against k's [B, H] batch dimensions and sums over tokens only.
        """
        w_down = self._columns(self.w_down, k.shape[-2], positions)  # [G, n_down, n] or [B, G, n_down, n]
        return w_down @ k  # [B, H, n_down, c]

    def low_rank_attention(self, q, k, positions: torch.Tensor | None = None) -> torch.Tensor:
        """A_down [B, H, n_q, n_down] (Eq. 1) from q, k [B, H, n, d], before sparsification. n_q = n - first_query:
        with ``cls_dense`` the CLS query gets no prediction."""
        q, k = self.project_queries_keys(q, k)  # [B, H, n, c], c = d or d // 2
        k_down = self.down_projected_keys(k, positions)  # [B, H, n_down, c]
        queries = q[:, :, self.first_query:]  # [B, H, n_q, c]
        return torch.softmax(queries @ k_down.transpose(-1, -2) * self.logit_scale(k.shape[-1]), dim=-1)

    def sparsify_coefficients(self, a_down: torch.Tensor) -> torch.Tensor:
        """A~_down [..., n_q, n_down] (Eq. 2): A_down where A_down > tau ("threshold"), or at the top_m largest
        entries of each query ("topm"); exactly zero elsewhere."""
        if self.coefficient_rule == "topm":
            kept = index_to_mask(torch.topk(a_down.detach(), self.top_m, dim=-1).indices, a_down.shape[-1])
        else:
            kept = a_down > self.tau
        return a_down * kept

    def coefficients(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """A~_down [B, H, n_q, n_down] (Eq. 1-2): the sparse coefficients."""
        return self.sparsify_coefficients(self.low_rank_attention(q, k, positions))

    def sparse_basis(self, n: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        """W~_up [G, n_down, n] (or [B, G, n_down, n]; G = H, or 1 with a shared basis): entries with |w| < up_prune
        pruned to exactly zero;
        with ``basis_threshold_abs`` the kept entries are |w| (the official code), else w."""
        w = self._columns(self.w_up, n, positions)
        if self.basis_threshold_abs:
            w = w.abs()
        pruned = w * (w.abs() >= self.up_prune)
        if self.training:  # straight-through: pruned in the forward pass, but a pruned weight can grow back
            return pruned + (w - w.detach()) * (w.abs() < self.up_prune)
        return pruned

    def scores(self, q, k, positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(connectivity scores S [B, H, n_q, n], sparse coefficients A~_down [B, H, n_q, n_down])."""
        coeff = self.coefficients(q, k, positions)
        return coeff @ self.sparse_basis(k.shape[-2], positions), coeff

    def up_projection_macs(self, coeff: torch.Tensor, positions: torch.Tensor | None = None) -> float:
        """Multiply-adds of the sparse-sparse product A~_down W~_up, per example: each nonzero coefficient
        (i, m) costs nnz(W~_up[m, :]). What a sparse kernel would spend; our dense matmul spends n * n_down * n.
        ``coeff`` [B, H, n_q, n_down] as the predictor returns it (n_q = n - first_query)."""
        num_keys = coeff.shape[-2] + self.first_query
        basis = self.sparse_basis(num_keys, positions)
        nnz_per_basis_row = (basis != 0).sum(-1).to(coeff.dtype)  # [(B,) G, n_down], G = H or 1 (shared)
        if nnz_per_basis_row.dim() == 2:
            nnz_per_basis_row = nnz_per_basis_row.unsqueeze(0)
        per_query = ((coeff != 0).to(coeff.dtype) * nnz_per_basis_row.unsqueeze(-2)).sum(-1)  # [B, H, n_q]
        return float(per_query.sum(dim=(-1, -2)).mean())

    def connections(self, a_down: torch.Tensor, coeff: torch.Tensor, basis: torch.Tensor, k: int,
                    scores: torch.Tensor | None = None) -> torch.Tensor:
        """The top-k index [B, H, n_q, k] by the module docstring's rule, from A_down and A~_down [B, H, n_q, n_down]
        and the basis W~_up [(B,) G, n_down, n] (G = H, or 1 shared by the heads): the k largest S = A~_down W~_up,
        ties at the k-th place by T = A_down W~_up, then by the lower token index (both summed by
        ``ranking_scores``). ``scores``: S when the caller has it already (the bench times the two steps apart)."""
        n = basis.shape[-1]
        if k == n:  # every key: nothing to rank (phase 1 and keep rate 1.0 skip the n x n scores)
            return torch.arange(n, device=basis.device).expand(*coeff.shape[:-1], n).clone()
        if scores is None:
            scores = ranking_scores(coeff, basis)  # [B, H, n_q, n] float64

        def tie_scores(rows: tuple[torch.Tensor, ...]) -> torch.Tensor:
            """T of the tied queries only: rows = (b, h, i) index tensors [R] -> [R, n], one ranking_scores call
            per basis (per head, or per example and head after token pruning) rather than a copy per row."""
            b, h, i = rows
            bases = basis.reshape(-1, *basis.shape[-2:])  # [G or B * G, n_down, n]
            g = h if basis.shape[-3] > 1 else torch.zeros_like(h)  # each row's head's basis (0 when shared)
            which = g if basis.dim() == 3 else b * basis.shape[-3] + g  # [R]: each row's basis
            out = torch.empty(len(i), basis.shape[-1], dtype=torch.float64, device=basis.device)
            for g in which.unique().tolist():
                sel = (which == g).nonzero().squeeze(-1)
                out[sel] = ranking_scores(a_down[b[sel], h[sel], i[sel]], bases[g])  # [R_g, n_down] x [n_down, n]
            return out

        return lexicographic_topk(scores, k, tie_scores)

    def forward(self, q: torch.Tensor, k: torch.Tensor, keep_rate: float, positions: torch.Tensor | None = None,
                with_scores: bool = False, select: Callable | None = None) -> dict:
        """Top-k connections per predicted query, from q, k [B, H, n, d]:

        {"index": [B, H, n_q, k] long, "coefficients": A~_down [B, H, n_q, n_down], "first_query": int}
        (+ with ``with_scores``: "scores": S [B, H, n_q, n], differentiable, in q's dtype, and "phase1_scores":
        what phase 1 distils, S itself or, with ``phase1_scores="raw"``, A_down W_up [B, H, n_q, n]), where row i
        is query ``first_query + i`` and k = ceil(keep_rate * n). The index follows the ranking rule of the module
        docstring (``connections``). ``select(predictor, q, k, keep_rate, positions, a_down=, coefficients=) ->
        index``: another implementation of that rule giving the same sets (the fused kernel's ``fused_selection``),
        in any order; it is handed this forward's A_down and A~_down (detached) rather than computing them again.
        """
        a_down = self.low_rank_attention(q, k, positions)  # [B, H, n_q, n_down]
        coeff = self.sparsify_coefficients(a_down)
        basis = self.sparse_basis(k.shape[-2], positions)  # [(B,) G, n_down, n]
        with torch.no_grad():
            index = (self.connections(a_down, coeff, basis, num_connections(keep_rate, k.shape[-2]))
                     if select is None else select(self, q, k, keep_rate, positions, a_down=a_down.detach(),
                                                   coefficients=coeff.detach()))
        out = {"index": index, "coefficients": coeff, "first_query": self.first_query}
        if with_scores:
            out["scores"] = coeff @ basis
            out["phase1_scores"] = out["scores"]
            if self.phase1_scores == "raw":
                out["phase1_scores"] = a_down @ self._columns(self.w_up, k.shape[-2], positions)
        return out


def ranking_scores(weights: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """sum_m weights[..., i, m] * basis[..., m, j] in float64, added in the order m = 0, 1, ..., n_down - 1:
    weights [..., n_q, n_down] and basis [..., n_down, n] (leading dimensions broadcast) -> [..., n_q, n].

    The one definition of the scores the top-k ranks, which the fused C++ kernel reproduces bit for bit: the
    product of two float32 numbers is exact in float64, so only the additions round, in a fixed order. A fused
    multiply-add rounds the same exact product once, and a zero term leaves a sum as it is, so the kernel may use
    either and visit the nonzero coefficients and basis entries only. A matmul is not used: its summation order
    is its own business. Equals ``weights @ basis`` up to float64 rounding; no autograd.
    """
    w, b = weights.detach().double(), basis.detach().double()
    shape = (*torch.broadcast_shapes(w.shape[:-2], b.shape[:-2]), w.shape[-2], b.shape[-1])
    out = torch.zeros(shape, dtype=torch.float64, device=w.device)
    for m in range(w.shape[-1]):
        out.addcmul_(w[..., m:m + 1], b[..., m:m + 1, :])  # [..., n_q, 1] x [..., 1, n]
    return out


def lexicographic_topk(primary: torch.Tensor, k: int,
                       secondary: Callable[[tuple[torch.Tensor, ...]], torch.Tensor]) -> torch.Tensor:
    """Indices [..., k] of the k keys of each row of ``primary`` [..., n] ranked first by ``primary``, then by the
    secondary key, then by the lower key index (all larger first, the index smaller first).

    Wherever the k-th largest primary value is unique (larger than the (k+1)-th), the set is exactly
    ``torch.topk(primary, k)``'s. Elsewhere the keys above the k-th value are kept, those below it dropped, and
    only the keys equal to it compete for the places left, by ``secondary(rows)``: the second key [R, n] of the
    tied rows ``rows`` (index tensors, as ``nonzero(as_tuple=True)`` gives them), asked for those rows only.
    """
    n = primary.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}], got {k}")
    if k == n:
        return torch.arange(n, device=primary.device).expand(*primary.shape[:-1], n).clone()
    values, index = torch.topk(primary, k + 1, dim=-1, sorted=True)  # [..., k + 1], largest first
    index = index[..., :k].contiguous()
    tied = values[..., k - 1] == values[..., k]  # [...]: the k-th place is shared
    if bool(tied.any()):
        rows = tied.nonzero(as_tuple=True)
        index[rows] = _resolve_ties(primary[rows], values[..., k - 1][rows], secondary(rows), k)
    return index


def _resolve_ties(primary: torch.Tensor, kth: torch.Tensor, secondary: torch.Tensor, k: int) -> torch.Tensor:
    """primary, secondary [R, n] and the k-th largest primary value kth [R] -> the kept keys [R, k]: every key
    above kth, then the keys equal to kth by secondary (larger first), then by index (a stable sort keeps equal
    keys in index order)."""
    kth = kth.unsqueeze(-1)
    rank = torch.where(primary > kth, math.inf, torch.where(primary == kth, secondary.to(primary.dtype), -math.inf))
    return torch.sort(rank, dim=-1, descending=True, stable=True).indices[:, :k]
