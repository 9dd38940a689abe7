"""Does Sparsifiner's attention run faster than dense attention, or only count fewer FLOPs?

    python -m bab bench sparse                       # n = 197, 577, 1025; keep rates 0.5, 0.25, 0.1
    python -m bab bench sparse --tokens 577 --keep-rates 0.1 --repeats 30

Times the attention core of one MHSA layer (DeiT-S shape: 6 heads of width 64, batch 1; q/k/v/o projections
excluded) with the ``bab.core.timing`` protocol, every variant interleaved in one process: ``dense`` (SDPA),
``sparse`` (the whole Sparsifiner path in torch: predictor, top-k, ``csr_sparse_attention``), ``fused`` (the same
path in ``bab.sparsifiner.fused``'s C++ kernel; empty where it cannot be built) and ``attention only`` (the sparse
attention given the indices). Each measured ratio stands beside the FLOP ratio ``FlopCounterMode`` counts (the
sparse attention on ``gathered_sparse_attention``, the same arithmetic) and the analytic limit in the paper's
convention (multiply-adds only: no cost for selection, gathers or exponentials).

The predictor's state: freshly initialised weights are degenerate for timing (an all-zero basis at n >= 250,
near-contiguous keys that flatter the sparse path), so by default (``predictor_state="realistic"``) the bench sets
the sparsities reported for the paper's trained predictor: ~90% of W_up under the prune threshold and ~87% of
A_down at or below tau (``set_realistic_state``); ``"init"`` keeps the fresh state. docs/speed.md, "bench sparse",
has the whole protocol and what limits the speed-up.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from bab.core.timing import TIMES, Repeats, count_flops, single_thread, time_side_by_side
from bab.sparsifiner.fused import fused_available, fused_selection, fused_sparsifiner_attention
from bab.sparsifiner.kernels import (
    csr_sparse_attention,
    dense_attention_macs,
    gathered_sparse_attention,
    predictor_macs,
    sparse_attention_macs,
)
from bab.sparsifiner.predictor import ConnectivityPredictor, num_connections, ranking_scores, validate_keep_rate

TOKENS = (197, 577, 1025)
KEEP_RATES = (0.5, 0.25, 0.1)
PREDICTOR_STATES = ("realistic", "init")
BASIS_SPARSITY = 0.90  # fraction of W_up entries pruned (|w| < up_prune) in the "realistic" state
COEFFICIENT_SPARSITY = 0.87  # fraction of A_down entries at or below tau in the "realistic" state


def set_realistic_state(predictor: ConnectivityPredictor, q: torch.Tensor, k: torch.Tensor,
                        basis_sparsity: float = BASIS_SPARSITY, coefficient_sparsity: float = COEFFICIENT_SPARSITY,
                        seed: int = 0) -> dict:
    """Give ``predictor`` (in place) a trained-looking sparsity for timing, on the inputs q, k [B, H, n, d]:

    - W_up [H, n_down, n]: a ``1 - basis_sparsity`` fraction of entries (chosen at random) drawn from
      [up_prune, 4 up_prune), the others from [0, up_prune), so the basis W~_up keeps ~10% of them;
    - W_down: scaled by a factor found by bisection so that a ``coefficient_sparsity`` fraction of A_down
      falls at or below tau (or as close as n_down and tau allow).

    Returns the sparsities reached: {"basis": fraction of W~_up that is zero, "coefficients": fraction of
    A_down <= tau}. Only meaningful for ``coefficients="threshold"`` (the default)."""
    for name, value in (("basis_sparsity", basis_sparsity), ("coefficient_sparsity", coefficient_sparsity)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must lie in [0, 1) (the fraction of zeros), got {value}")
    n = k.shape[-2]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        shape, prune = predictor.w_up[..., :n].shape, max(predictor.up_prune, 1e-6)
        kept = torch.rand(shape, generator=gen) >= basis_sparsity
        value = torch.rand(shape, generator=gen)
        predictor.w_up[..., :n] = torch.where(kept, prune * (1 + 3 * value), prune * value * 0.999)

        q_c, k_c = predictor.project_queries_keys(q, k)  # the predictor's own queries and keys

        def below_tau(scale: float) -> float:  # fraction of A_down <= tau with W_down times scale
            k_down = (predictor.w_down[..., :n] * scale) @ k_c
            logits = q_c[:, :, predictor.first_query:] @ k_down.transpose(-1, -2) * predictor.logit_scale(
                k_c.shape[-1])
            return float((torch.softmax(logits, dim=-1) <= predictor.tau).double().mean())

        # A tiny scale makes A_down uniform (1 / n_down, all below tau when tau > 1 / n_down); a growing scale
        # first lifts some coefficients above tau, then (one-hot softmax) drops them again. Bisect (in log
        # space) on the falling branch, between 1e-3 and the scale where the fewest fall below tau.
        grid = [10 ** (e / 4) for e in range(-12, 13)]
        low, high = 1e-3, min(grid, key=below_tau)
        for _ in range(30):
            mid = math.sqrt(low * high)
            low, high = (mid, high) if below_tau(mid) > coefficient_sparsity else (low, mid)
        predictor.w_down.mul_(high)
        basis = predictor.sparse_basis(n)
    return {"basis": float((basis == 0).double().mean()), "coefficients": below_tau(1.0)}


def make_predictor(q, k, n_down: int, tau: float, predictor_state: str = "realistic", seed: int = 0):
    """The predictor the benchmark times, in ``predictor_state`` ("realistic" or "init", see the module doc).
    Returns (predictor in eval mode, sparsities {"basis", "coefficients"} it has on q, k)."""
    if predictor_state not in PREDICTOR_STATES:
        raise ValueError(f"predictor_state must be one of {PREDICTOR_STATES}, got {predictor_state!r}")
    num_heads, n = q.shape[1], k.shape[-2]
    predictor = ConnectivityPredictor(num_heads, n, n_down=n_down, tau=tau).eval()
    if predictor_state == "realistic":
        return predictor, set_realistic_state(predictor, q, k, seed=seed)
    with torch.no_grad():
        a_down = predictor.low_rank_attention(q, k)
        basis = predictor.sparse_basis(n)
    return predictor, {"basis": float((basis == 0).double().mean()),
                       "coefficients": float((a_down <= predictor.tau).double().mean())}


def _explicit_dense(q, k, v):
    """The same maths as SDPA, as matmuls FlopCounterMode can count."""
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v


def bench_sparse_attention(tokens=TOKENS, keep_rates=KEEP_RATES, num_heads: int = 6, head_dim: int = 64,
                           batch_size: int = 1, n_down: int = 32, tau: float = 0.05, warmup: int = 3,
                           repeats: int | Repeats = 15, seed: int = 0, predictor_state: str = "realistic"
                           ) -> pd.DataFrame:
    """One row per (n, keep rate): median times and ratios; see the module doc. ``repeats``: a count, or
    ``bab.core.timing.Repeats`` with a target for the speed-ups' intervals (``attrs["repeats"]``: what each length
    took, in words).

    ``table.attrs["times_ms"]``: every repeat's ms of each timed path, named "<n> dense", "<n> sparse <rate>",
    "<n> fused <rate>" and "<n> attention only <rate>", repeat i of all of one length timed in the same
    interleaved round (``bab.core.timing.repeat_times`` pairs them for a speed-up's interval)."""
    keep_rates = [validate_keep_rate(r) for r in keep_rates]
    rows, times, done = [], {}, []
    with torch.no_grad(), single_thread():
        for n in tokens:
            torch.manual_seed(seed)
            q, k, v = (torch.randn(batch_size, num_heads, n, head_dim) for _ in range(3))
            predictor, sparsity = make_predictor(q, k, n_down, tau, predictor_state, seed)
            length_rows, timings = _bench_length(q, k, v, predictor, keep_rates, warmup, repeats)
            rows += [{**row, "basis sparsity": sparsity["basis"], "coefficient sparsity": sparsity["coefficients"]}
                     for row in length_rows]
            times.update({f"{n} {name}": list(timing.times_ms) for name, timing in timings.items()})
            done.append(len(timings["dense"].times_ms))
    table = pd.DataFrame(rows)
    table.attrs[TIMES] = times
    table.attrs["repeats"] = Repeats.of(repeats).describe(done)
    return table


def _bench_length(q, k, v, predictor, keep_rates, warmup: int, repeats: int | Repeats) -> tuple[list[dict], dict]:
    n, hidden = q.shape[-2], q.shape[-3] * q.shape[-1]
    fns = {"dense": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)}
    indices = {rate: predictor(q, k, rate)["index"] for rate in keep_rates}
    fused = fused_available()  # else (no compiler / ninja) the fused columns stay empty
    for rate in keep_rates:
        fns[f"sparse {rate}"] = lambda rate=rate: csr_sparse_attention(q, k, v, predictor(q, k, rate)["index"])
        if fused:
            fns[f"fused {rate}"] = lambda rate=rate: fused_sparsifiner_attention(predictor, q, k, v, rate)
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
        sparse_flops = (attn_flops + count_flops(lambda rate=rate: predictor(q, k, rate))
                        + ranking_flops(predictor, q))
        sparse_ms, attn_ms = timings[f"sparse {rate}"].median_ms, timings[f"attention only {rate}"].median_ms
        fused_ms = timings[f"fused {rate}"].median_ms if fused else math.nan
        attn_limit = dense_attention_macs(n, hidden) / sparse_attention_macs(n, kk, hidden)
        rows.append({
            "tokens": n, "keep_rate": rate, "k": kk, "dense ms": dense_ms, "sparse ms": sparse_ms,
            "measured speed-up": dense_ms / sparse_ms, "fused ms": fused_ms, "fused speed-up": dense_ms / fused_ms,
            "analytic limit": analytic,
            "attention-only ms": attn_ms, "attention-only speed-up": dense_ms / attn_ms,
            "attention-only limit": attn_limit, "FLOP ratio": dense_flops / sparse_flops,
            "attention-only FLOP ratio": dense_flops / attn_flops,
        })
    return rows, timings


def ranking_flops(predictor: ConnectivityPredictor, q: torch.Tensor) -> float:
    """FLOPs of the torch path's ranking scores S = A~_down W~_up, [B, H, n_q, n_down] x [n_down, n]: 2 per
    multiply-add, as FlopCounterMode counts a matmul. ``ranking_scores`` sums them in a fixed order with one
    elementwise multiply-add per coefficient, which FlopCounterMode does not see, so the count adds them here."""
    batch, heads, n = q.shape[0], q.shape[1], q.shape[-2]
    return 2.0 * batch * heads * (n - predictor.first_query) * predictor.n_down * n


def predictor_breakdown(tokens=TOKENS, keep_rate: float = 0.1, num_heads: int = 6, head_dim: int = 64,
                        n_down: int = 32, warmup: int = 3, repeats: int | Repeats = 15, seed: int = 0,
                        predictor_state: str = "realistic", tau: float = 0.05) -> pd.DataFrame:
    """Where the predictor's time goes, per n: low-rank attention A_down (down-projection, QK_down^T,
    softmax), the ranking scores (threshold and the n x n_down x n up-projection, ``ranking_scores``), the top-k
    (``ConnectivityPredictor.connections`` given the scores, ties at the k-th place included), and the sparse
    attention over the kept connections; dense SDPA beside them. Same protocol as the main benchmark.
    Then the fused path: "fused selection" (A_down and the coefficients in torch, then in the kernel the
    pruned basis, the sparse ranking scores and the top k) and "fused" (the whole path, selection and
    attention); their difference is the fused attention. Empty (NaN) where the kernel cannot be built."""
    keep_rate = validate_keep_rate(keep_rate)
    rows = []
    with torch.no_grad(), single_thread():
        for n in tokens:
            torch.manual_seed(seed)
            q, k, v = (torch.randn(1, num_heads, n, head_dim) for _ in range(3))
            predictor, _ = make_predictor(q, k, n_down, tau, predictor_state, seed)
            a_down = predictor.low_rank_attention(q, k)  # [1, H, n, n_down]
            basis = predictor.sparse_basis(n)  # [H, n_down, n]
            coeff = predictor.sparsify_coefficients(a_down)
            scores = ranking_scores(coeff, basis)  # the primary ranking score forward uses, [1, H, n, n]
            kk = num_connections(keep_rate, n)
            index = predictor.connections(a_down, coeff, basis, kk, scores)
            fns = {
                "dense SDPA": lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                "A_down": lambda q=q, k=k, p=predictor: p.low_rank_attention(q, k),
                "up-projection": lambda a=a_down, b=basis, p=predictor: ranking_scores(p.sparsify_coefficients(a), b),
                "top-k": lambda a=a_down, c=coeff, b=basis, s=scores, kk=kk, p=predictor: p.connections(a, c, b, kk, s),
                "sparse attention": lambda q=q, k=k, v=v, i=index: csr_sparse_attention(q, k, v, i),
            }
            if fused_available():
                fns["fused selection"] = lambda q=q, k=k, p=predictor: fused_selection(p, q, k, keep_rate)
                fns["fused"] = lambda q=q, k=k, v=v, p=predictor: fused_sparsifiner_attention(p, q, k, v, keep_rate)
            timings = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            times = {f"{name} ms": t.median_ms for name, t in timings.items()}
            times.setdefault("fused selection ms", math.nan)
            times.setdefault("fused ms", math.nan)
            rows.append({"tokens": n, "keep_rate": keep_rate, **times})
    return pd.DataFrame(rows)


def crossover(table: pd.DataFrame, column: str = "measured speed-up") -> str:
    """Where the full sparse path (``column``: "measured speed-up" for the torch path, "fused speed-up" for the
    fused kernel) starts to beat dense SDPA, in words (from the measured rows). Lengths with no measured ratio
    (the fused kernel could not be built) say "not measured", never "slower"."""
    lines = []
    for n, group in table.groupby("tokens"):
        if group[column].isna().all():
            lines.append(f"n={n}: not measured (no build)")
            continue
        faster = group[group[column] > 1.0]
        if faster.empty:
            lines.append(f"n={n}: sparse slower than dense at every keep rate measured")
        else:
            lines.append(f"n={n}: sparse faster than dense for keep rate <= {faster.keep_rate.max():g}")
    return "; ".join(lines)
