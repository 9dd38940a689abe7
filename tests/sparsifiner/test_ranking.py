"""The predictor's top-k ranking rule (bab.sparsifiner.predictor, module docstring): the k largest S; only keys
tied at the k-th place by T = A_down W~_up; then the lower index. Checked against references written here, never
against the code under test: torch.topk on a float64 S summed in the test wherever the k-th score is unique, index
sets worked out by hand where keys tie, and the rule spelled out as a Python sort. The fused C++ kernel
(bab.sparsifiner.fused) must select the torch path's sets bit for bit, ties included, in both of its builds."""

import shutil

import pytest
import torch

from bab.sparsifiner import fused
from bab.sparsifiner.bench import make_predictor
from bab.sparsifiner.predictor import ConnectivityPredictor, lexicographic_topk, num_connections

HAS_COMPILER = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


def sum_over_m(weights, basis):
    """weights [..., n_q, n_down] times basis [..., n_down, n] in float64, one basis row m at a time in increasing
    m. From float32 inputs every product is exact in float64, so only the additions round, in this order."""
    out = torch.zeros((), dtype=torch.float64)
    for m in range(weights.shape[-1]):
        out = out + weights[..., m:m + 1].double() * basis[..., m:m + 1, :].double()
    return out


def unique_kth(scores, k):
    """[...]: True where the k-th largest score of the row is larger than the (k+1)-th (k < n)."""
    values = scores.sort(-1, descending=True).values
    return values[..., k - 1] > values[..., k]


def differing(index, expected):
    """[...]: True where the two index tensors [..., k] keep different sets of keys."""
    return (index.sort(-1).values != expected.sort(-1).values).any(-1)


def ranked_first(scores: list, tie_scores: list, k: int) -> set:
    """The ranking rule written out: the first k keys in the order (S descending, T descending, index)."""
    return set(sorted(range(len(scores)), key=lambda j: (-scores[j], -tie_scores[j], j))[:k])


def reference_sets(scores, tie_scores, k) -> list[set]:
    """ranked_first of every row of S and T [..., n], flattened to a list."""
    rows = zip(scores.reshape(-1, scores.shape[-1]).tolist(), tie_scores.reshape(-1, scores.shape[-1]).tolist(),
               strict=True)
    return [ranked_first(s, t, k) for s, t in rows]


def as_sets(index) -> list[set]:
    return [set(row) for row in index.reshape(-1, index.shape[-1]).tolist()]


def tie_kinds(scores, tie_scores, k):
    """([...] rows where S ties at the k-th place, [...] rows where, among the keys tied in S, T ties too at the
    last place left), counted directly from S and T."""
    values = scores.sort(-1, descending=True).values
    kth = values[..., k - 1:k]
    tied_s = values[..., k - 1] == values[..., k]
    places = (k - (scores > kth).sum(-1)).unsqueeze(-1)  # places left to the keys tied at the k-th value
    group = torch.where(scores == kth, tie_scores, -torch.inf).sort(-1, descending=True).values
    tied_t = tied_s & (group.gather(-1, places - 1) == group.gather(-1, places)).squeeze(-1)
    return tied_s, tied_t


def no_secondary(rows):
    raise AssertionError(f"the secondary score was asked for rows {rows} although no row ties at the k-th place")


# ----------------------------------------------------------------------------- no ties: exactly torch.topk

@pytest.mark.parametrize("k", [1, 7, 40, 79])
def test_without_ties_the_kept_set_is_torch_topks(k):
    scores = torch.rand(3, 4, 60, 80, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
    assert unique_kth(scores, k).all()  # continuous random scores: no row ties at the k-th place
    index = lexicographic_topk(scores, k, no_secondary)
    assert index.shape == (3, 4, 60, k)
    assert differing(index, torch.topk(scores, k).indices).double().mean().item() == 0.0


def test_only_rows_tied_at_the_kth_place_ask_for_the_secondary_score_and_only_there_it_matters():
    """Even rows take 4 levels (ties nearly everywhere), odd rows stay continuous. The secondary score is asked
    for the tied rows only, once; the untied rows are torch.topk's; the tied rows, with T = 0, take the lower
    indices among the keys tied at the k-th value."""
    k = 10
    scores = torch.rand(2, 3, 50, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scores[:, :, ::2] = (scores[:, :, ::2] * 4).floor() / 4
    tied = ~unique_kth(scores, k)
    assert tied[:, :, ::2].double().mean() > 0.5 and not tied[:, :, 1::2].any()
    asked = []

    def zero_secondary(rows):
        asked.append(rows)
        return torch.zeros(len(rows[0]), 40, dtype=torch.float64)

    index = lexicographic_topk(scores, k, zero_secondary)
    assert len(asked) == 1
    assert sorted(zip(*(r.tolist() for r in asked[0]), strict=True)) == sorted(map(tuple, tied.nonzero().tolist()))
    assert not differing(index, torch.topk(scores, k).indices)[~tied].any()
    assert as_sets(index[tied]) == reference_sets(scores[tied], torch.zeros_like(scores[tied]), k)


def random_state(case: str, seed: int):
    """(predictor in float32, q, k, positions) for one of the states below."""
    g = torch.Generator().manual_seed(seed)
    if case.startswith("realistic"):  # the bench's state: ~90% of W~_up pruned, ~87% of A_down <= tau
        n = int(case.split()[-1])
        q, k = (torch.randn(1, 6, n, 64, generator=g) for _ in range(2))
        return make_predictor(q, k, n_down=32, tau=0.05, seed=seed)[0], q, k, None
    options = dict(cls_dense=True, coefficients="topm", top_m=2, basis_threshold_abs=True) if "official" in case else {}
    n_max, n = 60, (41 if "pruning" in case else 60)
    torch.manual_seed(seed)
    predictor = ConnectivityPredictor(3, n_max, n_down=8, tau=0.1, up_prune=0.05, **options).eval()
    with torch.no_grad():
        predictor.w_down.mul_(1 + 4 * torch.rand(1, generator=g))  # sharper or flatter A_down, seed by seed
        predictor.w_up.copy_(torch.randn(predictor.w_up.shape, generator=g) * 0.2)
    q, k = (torch.randn(2, 3, n, 16, generator=g) for _ in range(2))
    positions = None
    if "pruning" in case:  # CLS plus a different subset of the patches for each example
        positions = torch.stack([torch.cat([torch.zeros(1, dtype=torch.long),
                                            torch.randperm(n_max - 1, generator=g)[:n - 1].sort().values + 1])
                                 for _ in range(2)])
    return predictor, q, k, positions


STATES = ["random", "random official", "random token pruning", "realistic 50", "realistic 197"]


@pytest.mark.parametrize("case", STATES)
def test_predictor_keeps_torch_topk_of_s_wherever_the_kth_score_is_unique(case):
    """Random predictor states through ConnectivityPredictor.forward: S summed here in float64 with a loop over m.
    Rows whose k-th score is unique must keep torch.topk(S, k)'s set, all of them; every row (tied ones too)
    must keep the set of the rule written out as a sort."""
    checked = 0
    for seed in range(3):
        predictor, q, k, positions = random_state(case, seed)
        with torch.no_grad():
            a_down = predictor.low_rank_attention(q, k, positions)
            basis = predictor.sparse_basis(k.shape[-2], positions)
            scores, tie_scores = sum_over_m(predictor.sparsify_coefficients(a_down), basis), sum_over_m(a_down, basis)
            for keep_rate in (0.5, 0.25, 0.1):
                kk = num_connections(keep_rate, k.shape[-2])
                index = predictor(q, k, keep_rate, positions)["index"]
                unique = unique_kth(scores, kk)
                fraction = differing(index, torch.topk(scores, kk).indices)[unique].double().mean().item()
                assert fraction == 0.0, (seed, keep_rate, fraction)
                assert as_sets(index) == reference_sets(scores, tie_scores, kk), (seed, keep_rate)
                checked += int(unique.sum())
    assert checked > 0


# ----------------------------------------------------------------------------- ties, by hand

HAND_S = {
    "S ties, T decides": [0.5, 0.2, 0.2, 0.9, 0.2, 0.1],
    "S ties, T ties too": [0.5, 0.2, 0.2, 0.9, 0.2, 0.1],
    "S all zero": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "S and T all zero": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "negative S": [-0.1, 0.0, 0.0, -0.3, 0.0, 0.2],
}
HAND_T = {
    "S ties, T decides": [0.0, 0.3, 0.7, 0.0, 0.1, 5.0],  # key 5's large T never lifts it over S
    "S ties, T ties too": [0.0, 0.7, 0.3, 0.0, 0.7, 0.0],  # keys 1 and 4 tie in S and in T: 1 first
    "S all zero": [0.1, 0.4, -0.2, 0.4, 0.3, 0.0],
    "S and T all zero": [0.0] * 6,
    "negative S": [9.0, 0.5, 0.5, 9.0, 0.7, 0.0],  # keys 0 and 3 are below the tie at 0: their T does not count
}


@pytest.mark.parametrize("row, k, expected", [
    ("S ties, T decides", 2, {0, 3}),  # 0.9 and 0.5, above the tie at 0.2: T is not needed
    ("S ties, T decides", 3, {0, 2, 3}),  # one place for keys 1, 2, 4 (S = 0.2): T 0.3, 0.7, 0.1
    ("S ties, T decides", 4, {0, 1, 2, 3}),
    ("S ties, T decides", 5, {0, 1, 2, 3, 4}),
    ("S ties, T ties too", 3, {0, 1, 3}),  # keys 1 and 4 tie at T = 0.7: the lower index
    ("S ties, T ties too", 4, {0, 1, 3, 4}),
    ("S ties, T ties too", 5, {0, 1, 2, 3, 4}),
    ("S all zero", 1, {1}),  # keys 1 and 3 tie at T = 0.4
    ("S all zero", 2, {1, 3}),  # filled by T, not by index ({0, 1})
    ("S all zero", 3, {1, 3, 4}),
    ("S and T all zero", 2, {0, 1}),  # nothing left but the index
    ("negative S", 1, {5}),
    ("negative S", 3, {1, 4, 5}),  # keys 1, 2, 4 tie at S = 0 for two places: 4 (T 0.7), then 1 before 2
    ("negative S", 5, {0, 1, 2, 4, 5}),  # then key 0 (S -0.1) before key 3 (S -0.3), whatever their T
])
def test_ties_at_the_kth_place_by_hand(row, k, expected):
    scores = torch.tensor([HAND_S[row]], dtype=torch.float64)
    tie_scores = torch.tensor([HAND_T[row]], dtype=torch.float64)
    index = lexicographic_topk(scores, k, lambda rows: tie_scores[rows])
    assert set(index[0].tolist()) == expected


# One head, n = 7 keys, n_down = 4, tau = 0.2; every number a multiple of 1/16, so every sum is exact.
# Keys 0 and 6 have the same basis column: they tie in S and in T for every query.
HAND_BASIS = [[1.0, 0.0, 0.5, 0.5, 2.0, 0.0, 1.0],
              [0.0, 2.0, 1.0, 1.0, 0.0, 0.0, 0.0],
              [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
              [0.0, 0.0, 0.0, 1.0, 0.0, 8.0, 0.0]]
# A_down of three queries (not softmax outputs: the selection only reads the numbers). tau = 0.2 keeps
# query A's 0.5 and 0.25, none of query B's, query C's 0.5.
HAND_A_DOWN = [[0.5, 0.25, 0.125, 0.125], [0.125, 0.125, 0.125, 0.125], [0.125, 0.5, 0.125, 0.125]]
# query A: S = [.5, .5, .5, .5, 1, 0, .5], T = [.5, .625, .5, .75, 1, 1, .5]
#          4, then the keys tied at S = .5 by T: 3, 1, then 0, 2, 6 (T = .5) by index; key 5 (S = 0) last
# query B: S = 0, T = [.125, .375, .1875, .4375, .25, 1, .125]: 5, 3, 1, 4, 2, then 0 before 6
# query C: S = [0, 1, .5, .5, 0, 0, 0], T = [.125, 1.125, .5625, .8125, .25, 1, .125]:
#          1, then 3, 2 (S = .5, by T), then 5, 4, 0, 6 (S = 0, by T, then index)
HAND_EXPECTED = {  # k: (query A, query B, query C)
    1: ({4}, {5}, {1}),
    2: ({3, 4}, {3, 5}, {1, 3}),
    3: ({1, 3, 4}, {1, 3, 5}, {1, 2, 3}),
    4: ({0, 1, 3, 4}, {1, 3, 4, 5}, {1, 2, 3, 5}),
    5: ({0, 1, 2, 3, 4}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}),
    6: ({0, 1, 2, 3, 4, 6}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}),
    7: (set(range(7)),) * 3,
}


def hand_predictor():
    predictor = ConnectivityPredictor(1, 7, n_down=4, tau=0.2, up_prune=0.1).eval()
    with torch.no_grad():
        predictor.w_up.copy_(torch.tensor([HAND_BASIS]))
    return predictor


@pytest.mark.parametrize("k", sorted(HAND_EXPECTED))
def test_the_predictors_connections_by_hand(k):
    predictor = hand_predictor()
    a_down = torch.tensor([[HAND_A_DOWN]])  # [1, 1, 3, 4]
    with torch.no_grad():
        index = predictor.connections(a_down, predictor.sparsify_coefficients(a_down), predictor.sparse_basis(7), k)
    assert as_sets(index) == list(HAND_EXPECTED[k])


# ----------------------------------------------------------------------------- many ties, at random

def tie_heavy_state(B=2, H=2, n=150, n_down=8, seed=0):
    """(predictor, A_down [B, H, n, n_down]) on a grid of multiples of 1/32, so S and T tie often and are summed
    exactly: A_down in {0, 1/8, ..., 1/2} (tau = 0.2 keeps 1/4 and up; every 7th query keeps none, S = 0), W_up in
    multiples of 1/4 in [-1, 1], 60% set to zero and |w| = 1/4 pruned (up_prune = 0.3)."""
    g = torch.Generator().manual_seed(seed)
    predictor = ConnectivityPredictor(H, n, n_down=n_down, tau=0.2, up_prune=0.3).eval()
    levels = torch.randint(-4, 5, (H, n_down, n), generator=g) / 4
    with torch.no_grad():
        predictor.w_up.copy_(levels * (torch.rand(H, n_down, n, generator=g) >= 0.6))
    a_down = torch.randint(0, 5, (B, H, n, n_down), generator=g) / 8
    a_down[:, :, ::7] = a_down[:, :, ::7].clamp(max=0.125)
    return predictor, a_down


KEEP_RATES = (0.02, 0.1, 0.25, 0.5, 0.9)


@pytest.mark.parametrize("n", [40, 150, 300])
def test_many_ties_at_random_follow_the_rule_written_out(n):
    predictor, a_down = tie_heavy_state(n=n, seed=n)
    with torch.no_grad():
        coeff, basis = predictor.sparsify_coefficients(a_down), predictor.sparse_basis(n)
    scores, tie_scores = sum_over_m(coeff, basis), sum_over_m(a_down, basis)
    kinds = torch.zeros(2)
    for keep_rate in KEEP_RATES:
        kk = num_connections(keep_rate, n)
        with torch.no_grad():
            index = predictor.connections(a_down, coeff, basis, kk)
        assert as_sets(index) == reference_sets(scores, tie_scores, kk), keep_rate
        kinds += torch.tensor([float(kind.sum()) for kind in tie_kinds(scores, tie_scores, kk)])
    assert (kinds > 10).all(), f"too few rows tied in S, and in S and T: {kinds.tolist()}"


# ----------------------------------------------------------------------------- the fused kernel, bit for bit

# the portable build is marked slow: the first test to ask for it compiles it (about 30 s), as test_fused.py's does
@pytest.fixture(scope="module", params=["native", pytest.param("portable", marks=pytest.mark.slow)])
def kernel(request):
    """Each build of the fused kernel: native (-march=native, AVX-512 paths where the CPU has them) and portable
    (the plain loops). Skips where there is no C++ compiler; where there is one, a failed build fails."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH: the fused kernel cannot be built here")
    if request.param == "portable":  # the first test to ask compiles it (about 28 s); later ones reuse the build
        return fused._build(portable=True)
    module = fused.load_extension()
    assert module is not None, f"the fused kernel failed to build: {fused._state['error']!r}"
    return module


def kernel_selection(module, predictor, a_down, kk):
    """The kernel's index [B, H, n, kk] from A_down [B, H, n, n_down] given directly (no q, k: selection only)."""
    B, H, n, n_down = a_down.shape
    unused = torch.zeros(B * H, n, 1)  # q, k, v: read by the attention only, which with_attention=False skips
    coeff = predictor.sparsify_coefficients(a_down)
    _, index = module.fused_forward(unused, unused, unused, a_down.reshape(B * H, n, n_down).contiguous(),
                                    coeff.reshape(B * H, n, n_down).contiguous(),
                                    predictor.w_up.detach()[..., :n].contiguous(), H, kk, 0, predictor.up_prune,
                                    predictor.basis_threshold_abs, False)
    return index.view(B, H, n, kk)


@pytest.mark.parametrize("k", sorted(HAND_EXPECTED))
def test_the_kernels_selection_by_hand(kernel, k):
    a_down = torch.tensor([[HAND_A_DOWN * 2 + HAND_A_DOWN[:1]]])  # 7 queries (one per key): A, B, C, A, B, C, A
    index = kernel_selection(kernel, hand_predictor(), a_down, k)
    assert as_sets(index) == list(HAND_EXPECTED[k]) * 2 + [HAND_EXPECTED[k][0]]


@pytest.mark.parametrize("n", [40, 150, 300])
@pytest.mark.parametrize("n_down", [8, 32])
def test_the_kernel_selects_the_torch_paths_sets_where_many_keys_tie(kernel, n, n_down):
    predictor, a_down = tie_heavy_state(n=n, n_down=n_down, seed=n + n_down)
    for keep_rate in KEEP_RATES:
        kk = num_connections(keep_rate, n)
        with torch.no_grad():
            expected = predictor.connections(a_down, predictor.sparsify_coefficients(a_down),
                                             predictor.sparse_basis(n), kk)
        index = kernel_selection(kernel, predictor, a_down, kk)
        assert not differing(index, expected).any(), (keep_rate, differing(index, expected).nonzero().tolist())


@pytest.mark.parametrize("case", STATES + ["duplicate columns"])
def test_the_fused_path_selects_the_torch_paths_sets(kernel, case):
    """Through the public entry point, on the random and realistic states (ties at S = 0 where rows are short of
    candidates) and with every basis column repeated three times (keys tie in S and in T: the index decides)."""
    for seed in range(2):
        predictor, q, k, positions = random_state("random" if case == "duplicate columns" else case, seed)
        if case == "duplicate columns":
            with torch.no_grad():
                predictor.w_up.copy_(predictor.w_up[..., torch.arange(predictor.w_up.shape[-1]) // 3 * 3])
        v = torch.randn_like(q)
        for keep_rate in (0.5, 0.25, 0.1):
            with torch.no_grad():
                expected = predictor(q, k, keep_rate, positions)["index"]
                _, index = fused.fused_sparsifiner_attention(predictor, q, k, v, keep_rate, positions, module=kernel)
            assert not differing(index, expected).any(), (seed, keep_rate)


@pytest.mark.parametrize("options", [{}, {"cls_dense": True, "coefficients": "topm", "top_m": 2, "basis": "shared"}])
def test_keeping_every_key_ranks_nothing(monkeypatch, options):
    """At k = n (keep rate 1.0, and phase 1's dense pass) every query keeps every key in index order, and the n x n
    ranking scores are never formed; with token-pruning positions too."""
    import bab.sparsifiner.predictor as predictor_module

    torch.manual_seed(0)
    predictor = ConnectivityPredictor(num_heads=2, max_tokens=9, n_down=4, **options).eval()
    q, k = torch.randn(3, 2, 9, 4), torch.randn(3, 2, 9, 4)

    def no_ranking(*args, **kwargs):
        raise AssertionError("ranking_scores ran at k = n")

    monkeypatch.setattr(predictor_module, "ranking_scores", no_ranking)
    first = predictor.first_query
    index = predictor(q, k, 1.0)["index"]
    assert index.shape == (3, 2, 9 - first, 9)
    assert all(index[b, h, i].tolist() == list(range(9)) for b in range(3) for h in range(2) for i in range(9 - first))
    positions = torch.tensor([[0, 2, 4, 6, 8], [0, 1, 2, 3, 4], [0, 5, 6, 7, 8]])
    pruned = predictor(q[:, :, :5], k[:, :, :5], 1.0, positions)["index"]
    assert pruned.shape == (3, 2, 5 - first, 5) and (pruned == torch.arange(5)).all()
    with pytest.raises(AssertionError, match="ranking_scores ran"):  # below k = n the scores are formed
        predictor(q, k, 0.5)
