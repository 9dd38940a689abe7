"""Does Sparsifiner's attention run faster than dense attention, or only count fewer FLOPs?

    python -m bab bench sparse                       # n = 197, 577, 1025; keep rates 0.5, 0.25, 0.1
    python -m bab bench sparse --tokens 577 --keep-rates 0.1 --repeats 30

Times the attention core of one MHSA layer (DeiT-S shape: 6 heads of width 64, batch 1; the q/k/v/o
projections are excluded, as in the paper's "MHSA FLOPs"), with the ``bab.core.timing`` protocol: one
intra-op and one inter-op thread, ``no_grad``, warm-up, then the median of repeats with every variant
interleaved round by round, all in one process. Variants:

- ``dense``: ``F.scaled_dot_product_attention`` (the fastest dense kernel torch has on CPU);
- ``sparse``: the whole Sparsifiner path: connectivity predictor (down-projection, low-rank softmax,
  threshold, dense up-projection), top-k per query, then attention over the k selected keys only
  (``csr_sparse_attention``: SDDMM for the k scores per query, softmax, SpMM with V);
- ``attention only``: that sparse attention given the top-k indices (the predictor's share is the
  difference).

The predictor's random weights do not change its time (its up-projection runs as a dense matmul).

Beside each measured ratio (dense time / variant time) it prints the FLOP ratio, dense FLOPs /
variant FLOPs, counted by ``FlopCounterMode`` (matrix products only; it cannot see sparse kernels, so
the sparse attention is counted on ``gathered_sparse_attention``, the same arithmetic as bmm), and
the analytic ratio in the paper's convention (sparse-sparse up-projection, no top-k or gather cost).
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from bab.core.timing import count_flops, single_thread, time_side_by_side
from bab.sparsifiner.predictor import (
    ConnectivityPredictor,
    csr_sparse_attention,
    dense_attention_macs,
    gathered_sparse_attention,
    num_connections,
    predictor_macs,
    sparse_attention_macs,
    topk_connections,
    validate_keep_rate,
)

TOKENS = (197, 577, 1025)
KEEP_RATES = (0.5, 0.25, 0.1)


def _explicit_dense(q, k, v):
    """The same maths as SDPA, as matmuls FlopCounterMode can count."""
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v


def bench_sparse_attention(tokens=TOKENS, keep_rates=KEEP_RATES, num_heads: int = 6, head_dim: int = 64,
                           batch_size: int = 1, n_down: int = 32, tau: float = 0.05, warmup: int = 3,
                           repeats: int = 15, seed: int = 0) -> pd.DataFrame:
    """One row per (n, keep rate): median times and ratios; see the module doc."""
    keep_rates = [validate_keep_rate(r) for r in keep_rates]
    rows = []
    with torch.no_grad(), single_thread():
        for n in tokens:
            torch.manual_seed(seed)
            q, k, v = (torch.randn(batch_size, num_heads, n, head_dim) for _ in range(3))
            predictor = ConnectivityPredictor(num_heads, n, n_down=n_down, tau=tau).eval()
            rows += _bench_length(q, k, v, predictor, keep_rates, warmup, repeats)
    return pd.DataFrame(rows)


def _bench_length(q, k, v, predictor, keep_rates, warmup: int, repeats: int) -> list[dict]:
    n, hidden = q.shape[-2], q.shape[-3] * q.shape[-1]
    fns = {"dense": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)}
    indices = {rate: predictor(q, k, rate)["index"] for rate in keep_rates}
    for rate in keep_rates:
        fns[f"sparse {rate}"] = lambda rate=rate: csr_sparse_attention(q, k, v, predictor(q, k, rate)["index"])
        fns[f"attention only {rate}"] = lambda rate=rate: csr_sparse_attention(q, k, v, indices[rate])
    timings = time_side_by_side(fns, warmup=warmup, repeats=repeats)
    dense_flops = count_flops(lambda: _explicit_dense(q, k, v))
    dense_ms = timings["dense"].median_ms
    up_macs = predictor.up_projection_macs(predictor.coefficients(q, k))
    rows = []
    for rate in keep_rates:
        kk = num_connections(rate, n)
        analytic = dense_attention_macs(n, hidden) / (
            sparse_attention_macs(n, kk, hidden) + predictor_macs(n, predictor.n_down, hidden, up_macs))
        # FlopCounterMode does not see sparse kernels: count the gathered path, the same arithmetic as bmm
        attn_flops = count_flops(lambda rate=rate: gathered_sparse_attention(q, k, v, indices[rate]))
        sparse_flops = attn_flops + count_flops(lambda rate=rate: predictor(q, k, rate))
        sparse_ms, attn_ms = timings[f"sparse {rate}"].median_ms, timings[f"attention only {rate}"].median_ms
        rows.append({
            "tokens": n, "keep_rate": rate, "k": kk, "dense ms": dense_ms, "sparse ms": sparse_ms,
            "measured speed-up": dense_ms / sparse_ms, "FLOP ratio": dense_flops / sparse_flops,
            "analytic ratio (paper)": analytic, "attention-only ms": attn_ms,
            "attention-only speed-up": dense_ms / attn_ms,
            "attention-only FLOP ratio": dense_flops / attn_flops,
        })
    return rows


def predictor_breakdown(tokens=TOKENS, keep_rate: float = 0.1, num_heads: int = 6, head_dim: int = 64,
                        n_down: int = 32, warmup: int = 3, repeats: int = 15, seed: int = 0) -> pd.DataFrame:
    """Where the predictor's time goes, per n: low-rank attention A_down (down-projection, QK_down^T,
    softmax), the ranking key (threshold and the n x n_down x n up-projection), the top-k, and the sparse
    attention over the kept connections; dense SDPA beside them. Same protocol as the main benchmark."""
    keep_rate = validate_keep_rate(keep_rate)
    rows = []
    with torch.no_grad(), single_thread():
        for n in tokens:
            torch.manual_seed(seed)
            q, k, v = (torch.randn(1, num_heads, n, head_dim) for _ in range(3))
            predictor = ConnectivityPredictor(num_heads, n, n_down=n_down).eval()
            a_down = predictor.low_rank_attention(q, k)
            basis = predictor.sparse_basis(n)
            key = (a_down * (a_down > predictor.tau)) @ basis
            kk = num_connections(keep_rate, n)
            index = topk_connections(key, kk)
            fns = {
                "dense SDPA": lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                "A_down": lambda q=q, k=k, p=predictor: p.low_rank_attention(q, k),
                "up-projection": lambda a=a_down, b=basis, p=predictor: (a * (a > p.tau)) @ b,
                "top-k": lambda key=key, kk=kk: topk_connections(key, kk),
                "sparse attention": lambda q=q, k=k, v=v, i=index: csr_sparse_attention(q, k, v, i),
            }
            timings = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            times = {f"{name} ms": t.median_ms for name, t in timings.items()}
            rows.append({"tokens": n, "keep_rate": keep_rate, **times})
    return pd.DataFrame(rows)


def crossover(table: pd.DataFrame) -> str:
    """Where the full sparse path starts to beat dense SDPA, in words (from the measured rows)."""
    lines = []
    for n, group in table.groupby("tokens"):
        faster = group[group["measured speed-up"] > 1.0]
        if faster.empty:
            lines.append(f"n={n}: sparse slower than dense at every keep rate measured")
        else:
            lines.append(f"n={n}: sparse faster than dense for keep rate <= {faster.keep_rate.max():g}")
    return "; ".join(lines)
