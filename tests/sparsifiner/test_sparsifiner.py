"""Sparsifiner's connectivity predictor and sparse attention (bab.sparsifiner.predictor)."""

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from bab.__main__ import main as bab_main
from bab.sparsifiner.bench import (
    bench_sparse_attention,
    crossover,
    make_predictor,
    predictor_breakdown,
    set_realistic_state,
)
from bab.sparsifiner.fused import fused_available
from bab.sparsifiner.kernels import (
    attention_over_connections,
    connectivity_mask,
    csr_sparse_attention,
    gathered_sparse_attention,
    index_to_mask,
    masked_dense_attention,
    scatter_probs,
    sparse_attention,
    sparse_attention_macs,
)
from bab.sparsifiner.predictor import ConnectivityPredictor, num_connections, validate_keep_rate


def qkv(B=2, H=3, n=17, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g) for _ in range(3)]


@pytest.mark.parametrize("keep_rate, n, expected", [(1.0, 197, 197), (0.1, 197, 20), (0.05, 197, 10),
                                                    (0.3, 10, 3), (0.01, 50, 1), (0.25, 577, 145)])
def test_budget_is_ceil_of_keep_rate_times_tokens(keep_rate, n, expected):
    assert num_connections(keep_rate, n) == expected == max(1, math.ceil(round(keep_rate * n, 9)))


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), float("inf")])
def test_bad_keep_rates_raise_errors_that_say_how_to_fix_them(bad):
    with pytest.raises(ValueError, match=r"keep_rate must lie in \(0, 1\].*use 1.0 for full attention"):
        validate_keep_rate(bad)


@pytest.mark.parametrize("bad", ["0.5", None, True, [0.5]])
def test_keep_rates_of_the_wrong_type_raise_type_errors(bad):
    with pytest.raises(TypeError, match="keep_rate must be a number"):
        validate_keep_rate(bad)


def test_keep_rate_tensor_must_be_one_number():
    assert validate_keep_rate(torch.tensor(0.5)) == 0.5
    with pytest.raises(ValueError, match="single number"):
        validate_keep_rate(torch.tensor([0.5, 0.2]))


@pytest.mark.parametrize("keep_rate", [1.0, 0.5, 0.25, 0.1, 0.05])
def test_topk_keeps_exactly_k_distinct_connections_per_query(keep_rate):
    q, k, _ = qkv(n=41)
    predictor = ConnectivityPredictor(num_heads=3, max_tokens=41, n_down=6, tau=0.05).eval()
    index = predictor(q, k, keep_rate)["index"]
    kk = num_connections(keep_rate, 41)
    assert index.shape == (2, 3, 41, kk)
    mask = index_to_mask(index, 41)
    assert torch.all(mask.sum(-1) == kk)  # exactly k per query, no duplicates


def test_keep_rate_one_equals_dense_attention():
    q, k, v = qkv()
    dense = F.scaled_dot_product_attention(q, k, v)
    predictor = ConnectivityPredictor(3, 17, n_down=4).eval()
    index = predictor(q, k, 1.0)["index"]
    with torch.no_grad():
        for fn in (gathered_sparse_attention, csr_sparse_attention):
            torch.testing.assert_close(fn(q, k, v, index)[0], dense, atol=1e-5, rtol=1e-5)
    out_masked, probs = masked_dense_attention(q, k, v, index_to_mask(index, 17))
    torch.testing.assert_close(out_masked, dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("keep_rate", [0.5, 0.25, 0.1])
def test_sparse_paths_equal_masked_dense_attention(keep_rate):
    q, k, v = qkv(n=33)
    predictor = ConnectivityPredictor(3, 33, n_down=5).eval()
    index = predictor(q, k, keep_rate)["index"]
    reference, ref_probs = masked_dense_attention(q, k, v, index_to_mask(index, 33))
    gathered, g_probs = gathered_sparse_attention(q, k, v, index)
    torch.testing.assert_close(gathered, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scatter_probs(g_probs, index, 33), ref_probs, atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        csr, c_probs, c_index = csr_sparse_attention(q, k, v, index)
    torch.testing.assert_close(csr, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scatter_probs(c_probs, c_index, 33), ref_probs, atol=1e-6, rtol=1e-5)
    # outside the mask the reference puts exactly zero probability
    assert torch.all(ref_probs[~index_to_mask(index, 33)] == 0)


def test_sparse_attention_uses_csr_without_grad_and_gather_with_grad():
    q, k, v = qkv(n=9)
    index = torch.topk(torch.randn(2, 3, 9, 9), 3).indices
    q.requires_grad_(True)
    out, _, _ = sparse_attention(q, k, v, index)
    out.sum().backward()  # the gather path is differentiable
    assert q.grad is not None and torch.isfinite(q.grad).all()
    with torch.no_grad():
        out_csr, _, _ = sparse_attention(q, k, v, index)
    torch.testing.assert_close(out_csr, out.detach(), atol=1e-5, rtol=1e-5)


def test_no_nan_when_each_row_keeps_a_single_connection():
    q, k, v = qkv(n=12)
    q = q * 100  # huge logits: softmax over one entry must still be exactly 1
    index = torch.topk(torch.randn(2, 3, 12, 12), 1).indices
    masked, probs = masked_dense_attention(q, k, v, index_to_mask(index, 12))
    gathered, g_probs = gathered_sparse_attention(q, k, v, index)
    with torch.no_grad():
        csr, _, _ = csr_sparse_attention(q, k, v, index)
    for out in (masked, gathered, csr):
        assert torch.isfinite(out).all()
    assert torch.all(g_probs == 1.0)
    # one key per query: the output is exactly that key's value
    expected = torch.gather(v, 2, index.expand(-1, -1, -1, v.shape[-1]))
    torch.testing.assert_close(gathered, expected)
    torch.testing.assert_close(masked, expected)
    torch.testing.assert_close(csr, expected)


def test_predictor_thresholds_coefficients_and_prunes_the_basis():
    q, k, _ = qkv(n=20)
    predictor = ConnectivityPredictor(3, 20, n_down=8, tau=0.2, up_prune=0.1).eval()
    coeff = predictor.coefficients(q, k)
    assert coeff.shape == (2, 3, 20, 8)
    assert torch.all((coeff == 0) | (coeff > 0.2))
    basis = predictor.sparse_basis(20)
    assert torch.all((basis == 0) | (basis.abs() >= 0.1))
    scores, _ = predictor.scores(q, k)
    torch.testing.assert_close(scores, coeff @ basis)
    # the analytic up-projection count: one multiply-add per (nonzero coefficient, nonzero basis weight)
    expected = sum(float(((coeff[b, h] != 0).float() @ (basis[h] != 0).float().sum(-1)).sum()) for b in range(2)
                   for h in range(3)) / 2
    assert predictor.up_projection_macs(coeff) == pytest.approx(expected)


def test_pruned_basis_weights_get_straight_through_gradients_in_training():
    predictor = ConnectivityPredictor(1, 6, n_down=2, up_prune=0.5)
    with torch.no_grad():
        predictor.w_up.fill_(0.1)  # all below the threshold
    predictor.train()
    basis = predictor.sparse_basis(6)
    assert torch.all(basis == 0)
    basis.sum().backward()
    assert torch.all(predictor.w_up.grad == 1)


def test_predictor_rejects_bad_settings():
    with pytest.raises(ValueError, match="tau"):
        ConnectivityPredictor(2, 10, tau=1.5)
    with pytest.raises(ValueError, match="n_down"):
        ConnectivityPredictor(2, 10, n_down=0)
    predictor = ConnectivityPredictor(2, 10, n_down=3)
    q, k, _ = qkv(H=2, n=10)
    with pytest.raises(ValueError, match="keep_rate must lie"):
        predictor(q, k, 0.0)


def test_bench_reports_ratios_for_every_length_and_keep_rate(capsys):
    table = bench_sparse_attention(tokens=(16, 24), keep_rates=(0.5, 0.25), num_heads=2, head_dim=8, n_down=4,
                                   warmup=0, repeats=1)
    assert list(zip(table.tokens, table.keep_rate, strict=True)) == [(16, 0.5), (16, 0.25), (24, 0.5), (24, 0.25)]
    assert (table["dense ms"] > 0).all() and (table["sparse ms"] > 0).all()
    if fused_available():
        assert (table["fused ms"] > 0).all() and (table["fused speed-up"] > 0).all()
    # fewer connections, fewer counted FLOPs: the attention-only FLOP ratio is n / k
    assert table["attention-only FLOP ratio"].tolist() == pytest.approx([16 / 8, 16 / 4, 24 / 12, 24 / 6], rel=0.05)
    assert isinstance(crossover(table), str)
    # the whole path's count, by hand (FLOPs = 2 x multiply-adds; H = 2, d = 8, n_down = 4, every query predicted):
    # dense: QK^T and AV, 2 x 2 H n^2 d. Sparse: QK^T and AV over k keys, 2 x 2 H n k d; the predictor: K's
    # down-projection and Q K_down^T, 2 x H (n_down n d + n n_down d), and the ranking scores' up-projection over
    # every query and key, 2 H n n_down n, which a count of matmuls alone would miss (here: 16384 / 16384)
    n, k, H, d, m = 16, 8, 2, 8, 4
    dense = 2 * 2 * H * n * n * d
    sparse = 2 * 2 * H * n * k * d + 2 * H * (m * n * d + n * m * d) + 2 * H * n * m * n
    assert table["FLOP ratio"].iloc[0] == pytest.approx(dense / sparse, rel=0.02)
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "0.5", "--num-heads", "1", "--head-dim", "8",
                     "--n-down", "4", "--warmup", "0", "--repeats", "1"]) == 0
    assert "measured speed-up" in capsys.readouterr().out
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "1.5", "--repeats", "1"]) == 2
    assert "keep" in capsys.readouterr().err
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "0.5", "--num-heads", "1", "--head-dim", "8",
                     "--n-down", "4", "--warmup", "0", "--repeats", "2", "--interval-target", "1e-9",
                     "--max-repeats", "3"]) == 0
    assert "median of 3 repeats (2 to 3, until each speed-up was within +-1e-07%)" in capsys.readouterr().out


def test_a_query_with_all_coefficients_below_tau_ranks_by_the_unthresholded_scores():
    torch.manual_seed(0)
    q, k, _ = qkv(B=1, H=1, n=12)
    predictor = ConnectivityPredictor(1, 12, n_down=4, tau=0.99).eval()  # every coefficient falls below tau
    out = predictor(q, k, 0.25, with_scores=True)
    assert torch.all(out["coefficients"] == 0) and torch.all(out["scores"] == 0)
    fallback = predictor.low_rank_attention(q, k) @ predictor.sparse_basis(12)
    expected = torch.topk(fallback, 3, dim=-1).indices.sort(-1).values
    assert torch.equal(out["index"].sort(-1).values, expected)  # not simply the first k tokens
    assert not torch.equal(expected, torch.arange(3).expand_as(expected))


def test_nonzero_scores_still_decide_the_ranking():
    predictor = ConnectivityPredictor(1, 6, n_down=2, tau=0.0).eval()
    q, k, _ = qkv(B=1, H=1, n=6, d=4)
    out = predictor(q, k, 0.5, with_scores=True)
    assert torch.equal(out["index"].sort(-1).values, torch.topk(out["scores"], 3, dim=-1).indices.sort(-1).values)


def test_predictor_breakdown_times_every_part():
    parts = predictor_breakdown(tokens=(16,), keep_rate=0.25, num_heads=2, head_dim=8, n_down=4, warmup=0, repeats=1)
    assert list(parts.columns) == ["tokens", "keep_rate", "dense SDPA ms", "A_down ms", "up-projection ms", "top-k ms",
                                   "sparse attention ms", "fused selection ms", "fused ms"]
    timed = parts.iloc[0, 2:] if fused_available() else parts.iloc[0, 2:-2]  # fused: NaN without a compiler
    assert (timed > 0).all()


# ----------------------------------------------------------------------------- per head, per example
# An independent reference of the predictor: explicit loops over examples and heads, one plain matmul per
# equation and head, no einsum and no broadcasting over heads or examples. The predictor must equal it.

OFFICIAL = dict(cls_dense=True, coefficients="topm", top_m=2, basis_threshold_abs=True, predictor_scale="num_heads")


def reference_predictor(predictor, q, k, keep_rate, positions=None):
    """{"a_down", "coefficients", "scores": [B, H, n_q, .] float64, "index": per (b, h) a list of key sets}."""
    B, H, n, d = q.shape
    first = 1 if predictor.cls_dense else 0
    scale = 1 / math.sqrt(d if predictor.predictor_scale == "head_dim" else H)
    kk = num_connections(keep_rate, n)
    a_out, c_out, s_out = (torch.zeros(B, H, n - first, width, dtype=torch.float64)
                           for width in (predictor.n_down, predictor.n_down, n))
    index = {}
    for b in range(B):
        columns = torch.arange(n) if positions is None else positions[b]  # example b's own token positions
        for h in range(H):
            w_down = predictor.w_down[h][:, columns].double()  # head h's own W_down: [n_down, n]
            k_down = w_down @ k[b, h].double()  # [n_down, d]
            a_down = torch.softmax(q[b, h, first:].double() @ k_down.T * scale, dim=-1)  # [n_q, n_down]
            if predictor.coefficient_rule == "topm":
                kept = torch.zeros_like(a_down, dtype=torch.bool)
                for i in range(n - first):
                    kept[i, torch.topk(a_down[i], predictor.top_m).indices] = True
            else:
                kept = a_down > predictor.tau
            coeff = a_down * kept
            w_up = predictor.w_up[h][:, columns].double()
            if predictor.basis_threshold_abs:
                w_up = w_up.abs()
            basis = w_up * (w_up.abs() >= predictor.up_prune)
            a_out[b, h], c_out[b, h], s_out[b, h] = a_down, coeff, coeff @ basis
            scores, tie_scores = sum_over_m(coeff, basis), sum_over_m(a_down, basis)
            index[b, h] = [ranked_first(scores[i].tolist(), tie_scores[i].tolist(), kk) for i in range(n - first)]
    return {"a_down": a_out, "coefficients": c_out, "scores": s_out, "index": index}


def sum_over_m(weights, basis):
    """weights [n_q, n_down] times basis [n_down, n] in float64, one basis row m at a time in increasing m."""
    out = torch.zeros(weights.shape[0], basis.shape[1], dtype=torch.float64)
    for m in range(basis.shape[0]):
        out = out + weights[:, m:m + 1].double() * basis[m:m + 1].double()
    return out


def ranked_first(scores: list, tie_scores: list, k: int) -> set:
    """The ranking rule written out: the k keys first in the order (S descending, T descending, index)."""
    return set(sorted(range(len(scores)), key=lambda j: (-scores[j], -tie_scores[j], j))[:k])


def random_predictor(H=3, n=20, n_down=5, **options):
    """Random, signed W_up (so |W_up| and W_up differ) and no pruning of W_up below 0.05."""
    torch.manual_seed(0)
    predictor = ConnectivityPredictor(H, n, n_down=n_down, tau=0.1, up_prune=0.05, **options).eval()
    with torch.no_grad():
        predictor.w_up.copy_(torch.randn_like(predictor.w_up) * 0.2)
    return predictor.double()


def pruned_positions(B=4, n_max=20, n=12, seed=3):
    """Token pruning: CLS plus a different sorted subset of n - 1 patches for each example, [B, n]."""
    g = torch.Generator().manual_seed(seed)
    patches = [torch.randperm(n_max - 1, generator=g)[:n - 1].sort().values + 1 for _ in range(B)]
    return torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), p]) for p in patches])


def predictor_inputs(with_positions: bool, B=4, H=3, n_max=20, n=12, d=8):
    q, k, _ = (t.double() for t in qkv(B=B, H=H, n=n if with_positions else n_max, d=d, seed=5))
    return q, k, (pruned_positions(B, n_max, n) if with_positions else None)


def index_sets(index):
    """[B, H, n_q, k] -> {(b, h): [set of kept keys per query]}."""
    B, H = index.shape[:2]
    return {(b, h): [set(row) for row in index[b, h].tolist()] for b in range(B) for h in range(H)}


@pytest.mark.parametrize("with_positions", [False, True], ids=["all tokens", "token pruning"])
@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official options"])
def test_predictor_equals_a_loop_over_examples_and_heads(with_positions, options):
    predictor = random_predictor(**options)
    q, k, positions = predictor_inputs(with_positions)
    expected = reference_predictor(predictor, q, k, 0.25, positions)
    with torch.no_grad():
        out = predictor(q, k, 0.25, positions, with_scores=True)
        a_down = predictor.low_rank_attention(q, k, positions)
    for name, ours in (("a_down", a_down), ("coefficients", out["coefficients"]), ("scores", out["scores"])):
        per_head_error = (ours - expected[name]).abs().amax(dim=(0, 2, 3))
        assert per_head_error.max() < 1e-10, (name, per_head_error.tolist())
    assert index_sets(out["index"]) == expected["index"]


@pytest.mark.parametrize("with_positions", [False, True], ids=["all tokens", "token pruning"])
@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official options"])
def test_an_examples_connectivity_does_not_depend_on_its_batch(with_positions, options):
    predictor = random_predictor(**options)
    q, k, positions = predictor_inputs(with_positions)
    with torch.no_grad():
        alone = [predictor(q[b:b + 1], k[b:b + 1], 0.25, None if positions is None else positions[b:b + 1],
                           with_scores=True) for b in range(4)]
        for order in ([0, 1, 2, 3], [2, 0, 3, 1], [3, 3, 1, 0]):  # shuffled, and different companions
            batch = predictor(q[order], k[order], 0.25, None if positions is None else positions[order],
                              with_scores=True)
            for slot, b in enumerate(order):
                for name in ("coefficients", "scores"):
                    torch.testing.assert_close(batch[name][slot], alone[b][name][0], rtol=0, atol=1e-12)
                assert index_sets(batch["index"][slot:slot + 1]) == index_sets(alone[b]["index"])


# ----------------------------------------------------------------------------- one test per equation, by hand
# 2 heads, n = 3 tokens, n_down = 2, d = 4 (so 1/sqrt(d) = 1/2), one example. Different W_down per head, so a
# predictor that mixed the heads' projections gets different numbers. sigmoid(x) = softmax([x, 0])[0].

def sigmoid(x):
    return 1 / (1 + math.exp(-x))


S1, S2 = sigmoid(1), sigmoid(2)
HAND_Q = torch.tensor([[[[2., 0, 0, 0], [1, 0, 0, 0], [0, 0, 2, 0]],  # head 0: queries 0, 1, 2
                        [[0., 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]]])  # head 1
HAND_K = torch.tensor([[[[2., 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 0]],  # head 0: keys 0, 1, 2
                        [[1., 0, 0, 0], [0, 4, 0, 0], [1, 0, 2, 0]]]])  # head 1
HAND_W_DOWN = torch.tensor([[[1., 0, 0], [0, 0, 1]],  # head 0: K_down = [k0; k2]
                            [[0., 1, 0], [1, 0, 1]]])  # head 1: K_down = [k1; k0 + k2]
HAND_W_UP = torch.tensor([[[0.5, 0.125, -0.375], [0.25, 1.0, -0.125]],
                          [[0.0, 0.5, 1.0], [0.75, -0.25, 0.125]]])


def hand_predictor(tau=0.2, **options):
    predictor = ConnectivityPredictor(2, 3, n_down=2, tau=tau, up_prune=0.25, **options).eval()
    with torch.no_grad():
        predictor.w_down.copy_(HAND_W_DOWN)
        predictor.w_up.copy_(HAND_W_UP)
    return predictor


def test_k_down_is_each_heads_own_w_down_times_its_keys():
    expected = torch.tensor([[[[2., 0, 0, 0], [0, 0, 2, 0]],  # head 0: [k0; k2]
                              [[0., 4, 0, 0], [2, 0, 2, 0]]]])  # head 1: [k1; k0 + k2]
    torch.testing.assert_close(hand_predictor().down_projected_keys(HAND_K), expected)


def test_a_down_is_the_softmax_of_q_k_down_over_sqrt_d():
    # logits Q K_down^T / 2: head 0 [2, 0], [1, 0], [0, 2]; head 1 [2, 0], [0, 2], [0, 0]
    expected = torch.tensor([[[[S2, 1 - S2], [S1, 1 - S1], [1 - S2, S2]],
                              [[S2, 1 - S2], [1 - S2, S2], [0.5, 0.5]]]])
    torch.testing.assert_close(hand_predictor().low_rank_attention(HAND_Q, HAND_K), expected)


def test_tau_keeps_only_coefficients_strictly_above_it():
    # tau = 0.2 removes 1 - S2 = 0.119 and keeps 1 - S1 = 0.269 and 0.5
    expected = torch.tensor([[[[S2, 0], [S1, 1 - S1], [0, S2]],
                              [[S2, 0], [0, S2], [0.5, 0.5]]]])
    torch.testing.assert_close(hand_predictor(tau=0.2).coefficients(HAND_Q, HAND_K), expected)
    # tau = 0.5: a coefficient equal to tau is removed too (Eq. 2: kept only if A_down > tau)
    expected = torch.tensor([[[[S2, 0], [S1, 0], [0, S2]],
                              [[S2, 0], [0, S2], [0, 0]]]])
    torch.testing.assert_close(hand_predictor(tau=0.5).coefficients(HAND_Q, HAND_K), expected)


def test_w_up_entries_below_the_prune_threshold_become_zero_and_the_rest_keep_their_sign():
    expected = torch.tensor([[[0.5, 0, -0.375], [0.25, 1.0, 0]],  # |w| >= 0.25 kept (0.25 itself too)
                             [[0.0, 0.5, 1.0], [0.75, -0.25, 0]]])
    torch.testing.assert_close(hand_predictor().sparse_basis(3), expected)


def test_scores_are_the_sparse_coefficients_times_the_sparse_basis():
    expected = torch.tensor([[[[0.5 * S2, 0, -0.375 * S2],
                               [0.5 * S1 + 0.25 * (1 - S1), 1 - S1, -0.375 * S1],
                               [0.25 * S2, S2, 0]],
                              [[0, 0.5 * S2, S2],
                               [0.75 * S2, -0.25 * S2, 0],
                               [0.375, 0.125, 0.5]]]])
    scores, _ = hand_predictor().scores(HAND_Q, HAND_K)
    torch.testing.assert_close(scores, expected)


@pytest.mark.parametrize("keep_rate, expected", [
    (1 / 3, [[{0}, {0}, {1}], [{2}, {0}, {2}]]),  # k = 1: the largest score of each row above
    (0.5, [[{0, 1}, {0, 1}, {0, 1}], [{1, 2}, {0, 2}, {0, 2}]]),  # k = ceil(1.5) = 2
])
def test_topk_keeps_the_k_largest_scores_of_each_query(keep_rate, expected):
    index = hand_predictor()(HAND_Q, HAND_K, keep_rate)["index"]
    assert [[set(row) for row in head] for head in index[0].tolist()] == expected


def test_queries_with_every_coefficient_at_or_below_tau_rank_by_the_unthresholded_scores_by_hand():
    # tau = 0.9 zeroes every coefficient (the largest is S2 = 0.881), so S = 0 for every key and T =
    # A_down W~_up ranks them: head 0 [.470, .119, -.330], [.433, .269, -.274], [.280, .881, -.045];
    #               head 1 [.089, .411, .881], [.661, -.161, .119], [.375, .125, .5]
    out = hand_predictor(tau=0.9)(HAND_Q, HAND_K, 1 / 3, with_scores=True)
    assert torch.all(out["scores"] == 0)
    assert [[set(row) for row in head] for head in out["index"][0].tolist()] == [[{0}, {0}, {1}], [{2}, {0}, {2}]]


def test_attention_runs_over_the_kept_keys_only_by_hand():
    # one head, d = 4, k = 2 keys per query; q_i . k_j / 2 = [1, 0, 2], [0, 1, 0], [0, 0, 0]
    q = torch.tensor([[[[2., 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 0]]]])
    k = torch.tensor([[[[1., 0, 0, 0], [0, 1, 0, 0], [2, 0, 0, 0]]]])
    v = torch.tensor([[[[1., 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]]]])
    index = torch.tensor([[[[2, 0], [1, 0], [0, 1]]]])
    expected_probs = torch.tensor([[[[1 - S1, 0, S1],  # softmax([1, 2]) over keys 0 and 2
                                     [1 - S1, S1, 0],  # softmax([0, 1]) over keys 0 and 1
                                     [0.5, 0.5, 0]]]])  # equal scores over keys 0 and 1
    expected = expected_probs @ v
    torch.testing.assert_close(expected[0, 0, 0], torch.tensor([1 - S1, S1, 0, 0]))
    masked, probs = masked_dense_attention(q, k, v, index_to_mask(index, 3))
    torch.testing.assert_close(probs, expected_probs)
    for out in (masked, gathered_sparse_attention(q, k, v, index)[0], csr_sparse_attention(q, k, v, index)[0]):
        torch.testing.assert_close(out, expected)


# ----------------------------------------------------------------------------- the official code's options, by hand

def test_the_defaults_are_the_paper_text_not_the_official_options():
    predictor = ConnectivityPredictor(2, 10)
    assert (predictor.cls_dense, predictor.coefficient_rule, predictor.basis_threshold_abs,
            predictor.predictor_scale, predictor.first_query) == (False, "threshold", False, "head_dim", 0)


def test_cls_dense_makes_no_prediction_for_the_cls_query():
    predictor = hand_predictor(cls_dense=True)
    expected = torch.tensor([[[[S1, 1 - S1], [1 - S2, S2]],  # queries 1 and 2 only
                              [[1 - S2, S2], [0.5, 0.5]]]])
    torch.testing.assert_close(predictor.low_rank_attention(HAND_Q, HAND_K), expected)
    out = predictor(HAND_Q, HAND_K, 0.5, with_scores=True)
    assert out["first_query"] == 1 and out["index"].shape == (1, 2, 2, 2) and out["scores"].shape == (1, 2, 2, 3)
    assert [[set(row) for row in head] for head in out["index"][0].tolist()] == [[{0, 1}, {0, 1}], [{0, 2}, {0, 2}]]


def test_with_cls_dense_the_cls_query_attends_to_every_key():
    q = torch.tensor([[[[2., 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 0]]]])  # CLS scores q0 . k_j / 2 = [1, 0, 2]
    k = torch.tensor([[[[1., 0, 0, 0], [0, 1, 0, 0], [2, 0, 0, 0]]]])
    v = torch.tensor([[[[1., 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]]]])
    index = torch.tensor([[[[1, 0], [0, 1]]]])  # queries 1 and 2 only
    e = math.e
    cls_probs = [e / (1 + e + e * e), 1 / (1 + e + e * e), e * e / (1 + e + e * e)]
    expected_probs = torch.tensor([[[cls_probs, [1 - S1, S1, 0], [0.5, 0.5, 0]]]])
    mask = connectivity_mask(index, 3, first_query=1)
    assert mask[0, 0].tolist() == [[True, True, True], [True, True, False], [True, True, False]]
    masked, probs = masked_dense_attention(q, k, v, mask)
    torch.testing.assert_close(probs, expected_probs)
    torch.testing.assert_close(masked, expected_probs @ v)
    for kernel in ("gather", "csr"):
        out, sparse_probs = attention_over_connections(q, k, v, index, 1, kernel, need_probs=True)
        torch.testing.assert_close(out, masked)
        torch.testing.assert_close(sparse_probs, expected_probs)
    # n = 3, k = 2, D = 4: two queries over 2 keys and CLS over all 3 (QK^T and AV)
    assert sparse_attention_macs(3, 2, 4, dense_queries=1) == 2 * (2 * 2 + 3) * 4


def test_topm_keeps_the_m_largest_coefficients_of_each_query_whatever_tau():
    coeff = hand_predictor(tau=0.9, coefficients="topm", top_m=1).coefficients(HAND_Q, HAND_K)
    expected = torch.tensor([[[S2, 0], [S1, 0], [0, S2]], [[S2, 0], [0, S2], [0, 0]]])
    torch.testing.assert_close(coeff[0, :, :2], expected[:, :2])
    torch.testing.assert_close(coeff[0, 0, 2], expected[0, 2])
    assert sorted(coeff[0, 1, 2].tolist()) == [0.0, 0.5]  # a tie [0.5, 0.5]: exactly one of the two is kept
    a_down = hand_predictor(coefficients="topm", top_m=2).low_rank_attention(HAND_Q, HAND_K)
    torch.testing.assert_close(hand_predictor(coefficients="topm", top_m=2).coefficients(HAND_Q, HAND_K), a_down)


def test_basis_threshold_abs_keeps_the_absolute_values():
    predictor = hand_predictor(basis_threshold_abs=True)
    expected = torch.tensor([[[0.5, 0, 0.375], [0.25, 1.0, 0]],
                             [[0.0, 0.5, 1.0], [0.75, 0.25, 0]]])
    torch.testing.assert_close(predictor.sparse_basis(3), expected)
    predictor.train()  # straight-through: the forward is the same, every weight gets d|w|/dw = sign(w)
    basis = predictor.sparse_basis(3)
    torch.testing.assert_close(basis, expected)
    basis.sum().backward()
    torch.testing.assert_close(predictor.w_up.grad, torch.sign(HAND_W_UP))


def test_predictor_scale_num_heads_divides_the_logits_by_sqrt_h():
    # raw Q K_down^T: head 0 [4, 0], [2, 0], [0, 4]; head 1 [4, 0], [0, 4], [0, 0]; divided by sqrt(H = 2)
    t1, t2 = sigmoid(2 / math.sqrt(2)), sigmoid(4 / math.sqrt(2))
    expected = torch.tensor([[[[t2, 1 - t2], [t1, 1 - t1], [1 - t2, t2]],
                              [[t2, 1 - t2], [1 - t2, t2], [0.5, 0.5]]]])
    predictor = hand_predictor(predictor_scale="num_heads")
    torch.testing.assert_close(predictor.low_rank_attention(HAND_Q, HAND_K), expected)


@pytest.mark.parametrize("options, error, message", [
    (dict(coefficients="top8"), ValueError, "coefficients must be one of .*'topm' keeps the top_m largest"),
    (dict(coefficients="topm", top_m=5), ValueError, r"top_m must be an integer in \[1, n_down = 4\].*lower top_m"),
    (dict(coefficients="topm", top_m=0), ValueError, "top_m must be an integer"),
    (dict(predictor_scale="sqrt_d"), ValueError, "predictor_scale must be one of .*'head_dim'"),
    (dict(cls_dense="yes"), TypeError, "cls_dense must be True or False"),
    (dict(basis_threshold_abs=1), TypeError, "basis_threshold_abs must be True or False"),
])
def test_bad_predictor_options_raise_errors_that_say_how_to_fix_them(options, error, message):
    with pytest.raises(error, match=message):
        ConnectivityPredictor(2, 10, n_down=4, **options)


# ----------------------------------------------------------------------------- the bench's path
@pytest.mark.parametrize("n", [7, 64, 197])
@pytest.mark.parametrize("keep_rate", [0.5, 0.25, 0.1])
@pytest.mark.parametrize("order", ["topk", "descending", "shuffled"])
def test_csr_attention_with_unsorted_columns_equals_masked_dense(n, keep_rate, order):
    """The CSR kernel takes each row's keys in any order (no sort): same output as masked dense attention,
    probabilities in the order of the index it was given."""
    q, k, v = qkv(B=2, H=2, n=n, d=16, seed=n)
    kk = num_connections(keep_rate, n)
    index = torch.topk(torch.rand(2, 2, n, n, generator=torch.Generator().manual_seed(1)), kk, dim=-1,
                       sorted=False).indices
    if order == "descending":
        index = index.sort(dim=-1, descending=True).values
    elif order == "shuffled":
        index = index[..., torch.randperm(kk, generator=torch.Generator().manual_seed(2))]
    ref, ref_probs = masked_dense_attention(q, k, v, index_to_mask(index, n))
    with torch.no_grad():
        out, probs, used = csr_sparse_attention(q, k, v, index)
    assert torch.equal(used, index)  # returned as given, not sorted
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(probs, ref_probs.gather(-1, index), atol=1e-6, rtol=1e-5)


def test_realistic_predictor_state_has_the_requested_sparsities():
    q, k, _ = qkv(B=1, H=2, n=300, d=16)
    predictor, sparsity = make_predictor(q, k, n_down=32, tau=0.05)
    assert sparsity["basis"] == pytest.approx(0.90, abs=0.01)
    assert sparsity["coefficients"] == pytest.approx(0.87, abs=0.01)
    with torch.no_grad():  # what the predictor itself computes agrees with the reported numbers
        assert float((predictor.sparse_basis(300) == 0).double().mean()) == pytest.approx(sparsity["basis"])
        assert float((predictor.low_rank_attention(q, k) <= 0.05).double().mean()) == pytest.approx(
            sparsity["coefficients"], abs=1e-6)
        index = predictor(q, k, 0.1)["index"]
    assert not torch.equal(index.sort(-1).values, torch.arange(30).expand_as(index))  # not the contiguous pattern
    _, init = make_predictor(q, k, n_down=32, tau=0.05, predictor_state="init")
    assert init["basis"] == 1.0  # fresh W_up < 2.5 / n < up_prune: the degenerate state the old bench timed


def test_realistic_state_and_predictor_state_reject_bad_values():
    q, k, _ = qkv(B=1, H=1, n=16, d=8)
    with pytest.raises(ValueError, match="predictor_state"):
        make_predictor(q, k, n_down=4, tau=0.05, predictor_state="trained")
    with pytest.raises(ValueError, match="basis_sparsity"):
        set_realistic_state(make_predictor(q, k, 4, 0.05, "init")[0], q, k, basis_sparsity=1.0)
    with pytest.raises(ValueError, match="coefficient_sparsity"):
        set_realistic_state(make_predictor(q, k, 4, 0.05, "init")[0], q, k, coefficient_sparsity=-0.1)


def test_bench_prints_the_limits_and_the_predictor_state(capsys):
    table = bench_sparse_attention(tokens=(16,), keep_rates=(0.25,), num_heads=1, head_dim=8, n_down=4, warmup=0,
                                   repeats=1, predictor_state="init")
    assert table["attention-only limit"].tolist() == pytest.approx([16 / 4])
    assert {"analytic limit", "basis sparsity", "coefficient sparsity"} <= set(table.columns)
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "0.5", "--num-heads", "1", "--head-dim", "8",
                     "--n-down", "4", "--warmup", "0", "--repeats", "1", "--predictor-state", "init"]) == 0
    out = capsys.readouterr().out
    assert "predictor state 'init'" in out and "analytic limit" in out
    assert bab_main(["bench", "sparse", "--predictor-state", "trained"]) == 2


def test_crossover_says_not_measured_where_the_fused_kernel_has_no_timing():
    table = pd.DataFrame({"tokens": [197, 197, 577, 577], "keep_rate": [0.5, 0.1, 0.5, 0.1],
                          "measured speed-up": [0.4, 0.9, 0.8, 1.3], "fused speed-up": [float("nan")] * 4})
    assert crossover(table, "fused speed-up") == "n=197: not measured (no build); n=577: not measured (no build)"
    assert crossover(table) == ("n=197: sparse slower than dense at every keep rate measured; "
                                "n=577: sparse faster than dense for keep rate <= 0.1")
