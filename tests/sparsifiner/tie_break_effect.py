"""How often the predictor's old top-k ranking kept other keys than torch.topk(S, k) where nothing ties, measured:
a tool, not a test (pytest does not collect it).

    python tests/sparsifiner/tie_break_effect.py              # seeds 0-19
    python tests/sparsifiner/tie_break_effect.py 5            # seeds 0-4

The old rule ranked the key (A~_down + 1e-3 A_down) W~_up, one float32 matmul, with torch.topk: the 1e-3 term
was meant to order ties of S only, but it shifts every key a little and so can swap two keys whose S differ. The
current rule (bab.sparsifiner.predictor, module docstring) keeps the k largest S and consults A_down W~_up only
among keys tied at the k-th place. On the bench's realistic predictor state (bab.sparsifiner.bench.make_predictor:
6 heads of width 64, n_down = 32, tau = 0.05, q and k drawn as the bench draws them, one draw per seed) it counts
the query rows whose k-th largest S is unique (S summed here in float64, one basis row at a time) and, of those,
the fraction whose kept set differs from torch.topk(S, k): the old rule as it ran, the old key in float64 (the
1e-3 term alone, without float32 rounding), and the current ConnectivityPredictor.forward.
"""

import sys

import torch

from bab.sparsifiner.bench import make_predictor
from bab.sparsifiner.predictor import num_connections

OLD_TIE_BREAK = 1e-3  # the weight of A_down in the old ranking key
TOKENS = (50, 197)
KEEP_RATES = (0.5, 0.25, 0.1)


def scores_float64(coeff, basis):
    """S = A~_down W~_up in float64, basis row m after row m, in increasing m (exact products of float32s)."""
    out = torch.zeros((), dtype=torch.float64)
    for m in range(coeff.shape[-1]):
        out = out + coeff[..., m:m + 1].double() * basis[..., m:m + 1, :].double()
    return out


def differing(index, expected):
    """[...]: True where the two index tensors [..., k] keep different sets of keys."""
    return (index.sort(-1).values != expected.sort(-1).values).any(-1)


def count_rows(n: int, keep_rate: float, seeds) -> dict:
    """Rows, rows with a unique k-th S, and how many of those each rule gets wrong, summed over the seeds."""
    counts = dict.fromkeys(("rows", "unique", "old", "old float64", "new"), 0)
    kk = num_connections(keep_rate, n)
    for seed in seeds:
        torch.manual_seed(seed)  # as bench_sparse_attention draws its inputs
        q, k = torch.randn(1, 6, n, 64), torch.randn(1, 6, n, 64)
        predictor, _ = make_predictor(q, k, n_down=32, tau=0.05, predictor_state="realistic", seed=seed)
        with torch.no_grad():
            a_down = predictor.low_rank_attention(q, k)
            coeff, basis = predictor.sparsify_coefficients(a_down), predictor.sparse_basis(n)
            scores = scores_float64(coeff, basis)
            values = scores.sort(-1, descending=True).values
            unique = values[..., kk - 1] > values[..., kk]
            expected = torch.topk(scores, kk).indices
            kept = {"old": torch.topk((coeff + OLD_TIE_BREAK * a_down) @ basis, kk).indices,
                    "old float64": torch.topk((coeff.double() + OLD_TIE_BREAK * a_down.double()) @ basis.double(),
                                              kk).indices,
                    "new": predictor(q, k, keep_rate)["index"]}
        counts["rows"] += unique.numel()
        counts["unique"] += int(unique.sum())
        for rule, index in kept.items():
            counts[rule] += int(differing(index, expected)[unique].sum())
    return counts


def main(num_seeds: int = 20) -> None:
    torch.set_num_threads(1)
    seeds = range(num_seeds)
    print(f"bench's realistic predictor state, 6 heads, n_down = 32, tau = 0.05, seeds 0-{num_seeds - 1}: rows whose "
          f"k-th largest S is unique, and the share of them that keep another set than torch.topk(S, k)")
    print(f"{'n':>4} {'keep':>5} {'k':>4} {'rows':>6} {'unique k-th':>12} {'old rule':>16} {'old key, float64':>17} "
          f"{'new rule':>9}")
    for n in TOKENS:
        for keep_rate in KEEP_RATES:
            c = count_rows(n, keep_rate, seeds)
            share = {rule: f"{c[rule]} ({c[rule] / max(c['unique'], 1):.2%})" for rule in ("old", "old float64", "new")}
            print(f"{n:>4} {keep_rate:>5} {num_connections(keep_rate, n):>4} {c['rows']:>6} {c['unique']:>12} "
                  f"{share['old']:>16} {share['old float64']:>17} {share['new']:>9}")


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and not sys.argv[1].isdigit()):
        sys.exit(__doc__)
    main(int(sys.argv[1]) if len(sys.argv) == 2 else 20)
