"""Sparsifiner's connectivity predictor and sparse attention (bab.sparsifiner.predictor)."""

import math

import pytest
import torch
import torch.nn.functional as F

from bab.__main__ import main as bab_main
from bab.sparsifiner.bench import bench_sparse_attention, crossover, predictor_breakdown
from bab.sparsifiner.predictor import (
    ConnectivityPredictor,
    csr_sparse_attention,
    gathered_sparse_attention,
    index_to_mask,
    masked_dense_attention,
    num_connections,
    scatter_probs,
    sparse_attention,
    topk_connections,
    validate_keep_rate,
)


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


def test_topk_picks_the_largest_scores():
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.7, 0.0]])
    assert sorted(topk_connections(scores, 2)[0].tolist()) == [1, 3]
    with pytest.raises(ValueError, match="k must lie in"):
        topk_connections(scores, 6)


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
    index = topk_connections(torch.randn(2, 3, 9, 9), 3)
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
    index = topk_connections(torch.randn(2, 3, 12, 12), 1)
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
    # fewer connections, fewer counted FLOPs: the attention-only FLOP ratio is n / k
    assert table["attention-only FLOP ratio"].tolist() == pytest.approx([16 / 8, 16 / 4, 24 / 12, 24 / 6], rel=0.05)
    assert isinstance(crossover(table), str)
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "0.5", "--num-heads", "1", "--head-dim", "8",
                     "--n-down", "4", "--warmup", "0", "--repeats", "1"]) == 0
    assert "measured speed-up" in capsys.readouterr().out
    assert bab_main(["bench", "sparse", "--tokens", "16", "--keep-rates", "1.5", "--repeats", "1"]) == 2
    assert "keep" in capsys.readouterr().err


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
                                   "sparse attention ms"]
    assert (parts.iloc[0, 2:] > 0).all()
