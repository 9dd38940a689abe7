"""Attention over the connections a connectivity predictor chose, by three kernels that must agree numerically,
and the multiply-adds each costs (the Sparsifiner paper's "MHSA FLOPs").

- ``masked_dense_attention``: the reference (and what the official code does): the full n x n score matrix,
  entries outside the mask M set to -inf, softmax, times V. Saves FLOPs on paper only.
- ``gathered_sparse_attention``: gathers the k selected keys and values of each query and computes k scores per
  query, so its work really is proportional to n * k (plus the gather); differentiable.
- ``csr_sparse_attention``: the same through torch's CSR sparse-dense products (inference).

Shapes: B batch, H heads, n tokens (keys), n_q predicted queries, k kept keys per query, d head width.
"""

from __future__ import annotations

import math
import warnings

import torch


def index_to_mask(index: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Boolean connectivity mask M [..., n, num_keys] with exactly the indexed keys set."""
    mask = torch.zeros(*index.shape[:-1], num_keys, dtype=torch.bool, device=index.device)
    return mask.scatter_(-1, index, True)


def connectivity_mask(index: torch.Tensor, num_keys: int, first_query: int = 0) -> torch.Tensor:
    """The whole mask M [B, H, first_query + n_q, num_keys] from the predictor's index [B, H, n_q, k]: the first
    ``first_query`` rows (the CLS query with ``cls_dense``) keep every key, row first_query + i its indexed keys."""
    dense_rows = torch.ones(*index.shape[:-2], first_query, num_keys, dtype=torch.bool, device=index.device)
    return torch.cat([dense_rows, index_to_mask(index, num_keys)], dim=-2)


def dense_attention(q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d)) V as explicit matmuls: q [B, H, n_q, d], k, v [B, H, n, d] ->
    (out [B, H, n_q, d], probabilities [B, H, n_q, n])."""
    probs = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)
    return probs @ v, probs


def masked_dense_attention(q, k, v, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference path: full scores [B, H, n, n], -inf outside ``mask``, softmax, times V.

    Returns (out [B, H, n, d], probabilities [B, H, n, n]). Every row of ``mask`` must keep at least one key.
    """
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return probs @ v, probs


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [B, H, n_keys, d], index [B, H, n, k] -> x[b, h, index[b, h, i, j]] as [B, H, n, k, d] (one index_select)."""
    B, H, n_keys, d = x.shape
    offsets = (torch.arange(B * H, device=x.device) * n_keys).view(B, H, 1, 1)
    flat = (index + offsets).reshape(-1)
    return x.reshape(B * H * n_keys, d).index_select(0, flat).view(*index.shape, d)


def gathered_sparse_attention(q, k, v, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse path: per query only its k selected keys/values (work ~ n * k * d instead of n * n * d).

    q, k, v: [B, H, n, d]; index: [B, H, n, k]. Returns (out [B, H, n, d], probabilities [B, H, n, k]
    over the selected keys, in the order of ``index``).
    """
    k_sel = gather_rows(k, index)  # [B, H, n, k, d]
    v_sel = gather_rows(v, index)
    scores = (k_sel @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])  # [B, H, n, k]
    probs = torch.softmax(scores, dim=-1)
    return (probs.unsqueeze(-2) @ v_sel).squeeze(-2), probs


def csr_sparse_attention(q, k, v, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse path for inference on CPU: per head a CSR matrix with the k selected keys of each query;
    ``torch.sparse.sampled_addmm`` computes only those k scores (SDDMM), a softmax over the k values of
    each row, then a CSR x dense product with V (SpMM). K and V are read in place, never copied per query,
    which is why this beats the gather on CPU. No autograd (sampled_addmm has none on CSR here).

    The column indices of each row stay in the order of ``index`` (top-k's order), unsorted: both CPU kernels
    only visit a row's entries (a dot product per entry, a sum over the row), so the order does not change
    the result (tests/sparsifiner check it against masked dense attention), and sorting the [n, k] index per
    row cost more than the attention itself at n >= 577. The tensors are built without
    ``check_invariants``, which would reject unsorted columns.

    Same inputs and outputs as ``gathered_sparse_attention`` (q [B, H, n, d] may have fewer rows than k, v
    [B, H, n_keys, d]); probabilities [B, H, n, k] come back in the order of ``index``, returned as it is.
    """
    B, H, n, d = q.shape
    n_keys, kk = k.shape[-2], index.shape[-1]
    cols = index.reshape(B * H, n * kk)
    crow = torch.arange(0, n * kk + 1, kk, device=q.device)
    qf = q.reshape(B * H, n, d)
    kf, vf = (t.reshape(B * H, n_keys, d) for t in (k, v))
    out = torch.empty(B * H, n, d, dtype=q.dtype, device=q.device)
    probs = torch.empty(B * H, n, kk, dtype=q.dtype, device=q.device)
    zeros = torch.zeros(n * kk, dtype=q.dtype, device=q.device)
    scale = 1.0 / math.sqrt(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta" and invariant-check notes
        for i in range(B * H):  # batched CSR products are not implemented on CPU
            pattern = torch.sparse_csr_tensor(crow, cols[i], zeros, (n, n_keys))
            scores = torch.sparse.sampled_addmm(pattern, qf[i], kf[i].T, beta=0.0, alpha=scale)
            probs[i] = torch.softmax(scores.values().view(n, kk), dim=-1)
            out[i] = torch.sparse_csr_tensor(crow, cols[i], probs[i].reshape(-1), (n, n_keys)) @ vf[i]
    return out.view(B, H, n, d), probs.view(B, H, n, kk), index


SPARSE_KERNELS = ("auto", "csr", "gather")


def sparse_attention(q, k, v, index: torch.Tensor, kernel: str = "auto"):
    """Attention over the indexed keys only. ``kernel="auto"``: the CSR kernel when no gradient is needed
    (inference), the gather otherwise; "gather" also lets FlopCounterMode see the arithmetic (it cannot
    see sparse kernels). Returns (out [B, H, n, d], probabilities [B, H, n, k], the index they refer to)."""
    if kernel not in SPARSE_KERNELS:
        raise ValueError(f"kernel must be one of {SPARSE_KERNELS}, got {kernel!r}")
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if kernel == "csr" or (kernel == "auto" and not needs_grad):
        return csr_sparse_attention(q, k, v, index)
    out, probs = gathered_sparse_attention(q, k, v, index)
    return out, probs, index


def scatter_probs(probs: torch.Tensor, index: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Sparse probabilities [..., n, k] back to a dense [..., n, num_keys] map (zeros elsewhere), for plots."""
    dense = torch.zeros(*probs.shape[:-1], num_keys, dtype=probs.dtype, device=probs.device)
    return dense.scatter_(-1, index, probs)


def attention_over_connections(q, k, v, index: torch.Tensor, first_query: int = 0, kernel: str = "auto",
                               need_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The predictor's connectivity applied with a sparse kernel: q, k, v [B, H, n, d], index [B, H, n_q, k]
    for queries first_query..n-1 (n_q = n - first_query). The first ``first_query`` queries (CLS with
    ``cls_dense``) attend to every key, densely. Returns (out [B, H, n, d], probabilities [B, H, n, n] when
    ``need_probs``, else None); equal to ``masked_dense_attention`` with ``connectivity_mask``."""
    out, sparse_probs, used_index = sparse_attention(q[:, :, first_query:], k, v, index, kernel)
    probs = scatter_probs(sparse_probs, used_index, k.shape[-2]) if need_probs else None
    if first_query:
        dense_out, dense_probs = dense_attention(q[:, :, :first_query], k, v)
        out = torch.cat([dense_out, out], dim=-2)
        probs = torch.cat([dense_probs, probs], dim=-2) if need_probs else None
    return out, probs


def dense_attention_macs(n: int, hidden: int) -> float:
    """Multiply-adds of QK^T and AV for one layer and example: 2 * n^2 * D (the paper's 'MHSA FLOPs')."""
    return 2.0 * n * n * hidden


def sparse_attention_macs(n: int, k: int, hidden: int, dense_queries: int = 0) -> float:
    """QK^T and AV over k keys per query: 2 * n * k * D; the first ``dense_queries`` queries (CLS with
    ``cls_dense``) attend to all n keys: 2 * ((n - dense_queries) * k + dense_queries * n) * D."""
    return 2.0 * ((n - dense_queries) * k + dense_queries * n) * hidden


def predictor_macs(n: int, n_down: int, hidden: int, up_projection: float, dense_queries: int = 0) -> float:
    """Down-projection of K (n_down * n * D), Q K_down^T for the predicted queries ((n - dense_queries) * n_down
    * D), plus the up-projection's multiply-adds."""
    return (2.0 * n - dense_queries) * n_down * hidden + up_projection
