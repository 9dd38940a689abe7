"""The fused Sparsifiner inference kernel (bab.sparsifiner.fused) against the reference path: the predictor's own
top-k index (``ConnectivityPredictor.forward``) and ``masked_dense_attention`` with ``connectivity_mask``. Ties at
the k-th place, built on purpose, are in test_ranking.py."""

import fnmatch
import shutil
import tomllib
import warnings
from pathlib import Path

import pytest
import torch

from bab.sparsifiner import fused
from bab.sparsifiner.bench import make_predictor
from bab.sparsifiner.kernels import connectivity_mask, masked_dense_attention
from bab.sparsifiner.predictor import ConnectivityPredictor, num_connections

HAS_COMPILER = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


@pytest.fixture(scope="module")
def kernel():
    """The compiled kernel (built once per machine, then loaded from torch's extension cache). Skips where there
    is no C++ compiler at all; where there is one, a failed build is a test failure, not a skip."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH: the fused kernel cannot be built here")
    module = fused.load_extension()
    assert module is not None, f"the fused kernel failed to build: {fused._state['error']!r}"
    return module


def random_predictor(H=3, n=40, n_down=8, tau=0.1, up_prune=0.05, seed=0, **options):
    """Random, signed W_up (so |W_up| and W_up differ), pruned below 0.05; float32, eval mode."""
    torch.manual_seed(seed)
    predictor = ConnectivityPredictor(H, n, n_down=n_down, tau=tau, up_prune=up_prune, **options).eval()
    with torch.no_grad():
        predictor.w_up.copy_(torch.randn_like(predictor.w_up) * 0.2)
    return predictor


def qkv(B=2, H=3, n=40, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g) for _ in range(3)]


def assert_same_selection(index, predictor, q, k, keep_rate, positions=None):
    """The fused index [B, H, n_q, kk] holds exactly kk distinct keys per query, the same set as the reference
    predictor's in every row: both start from the same coefficients (the fused path takes the predictor's A_down
    and A~_down) and apply the same ranking rule to the same float64 sums, so no rounding may tell them apart."""
    with torch.no_grad():
        ref = predictor(q, k, keep_rate, positions)["index"]
    assert index.shape == ref.shape and index.dtype == torch.long
    ours, theirs = index.sort(-1).values, ref.sort(-1).values
    assert (ours[..., 1:] != ours[..., :-1]).all(), "a query kept the same key twice"
    differ = (ours != theirs).any(-1).nonzero().tolist()
    assert not differ, f"{len(differ)} rows keep other keys than the torch path's, the first (b, h, i): {differ[:5]}"


def assert_output_is_masked_dense_attention(out, index, predictor, q, k, v):
    mask = connectivity_mask(index, k.shape[-2], predictor.first_query)
    expected, _ = masked_dense_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


OFFICIAL = dict(cls_dense=True, coefficients="topm", top_m=2, basis_threshold_abs=True, predictor_scale="num_heads")
OPTIONS = {"defaults": {}, "cls_dense": dict(cls_dense=True), "topm": dict(coefficients="topm", top_m=3),
           "abs basis": dict(basis_threshold_abs=True), "scale num_heads": dict(predictor_scale="num_heads"),
           "official": OFFICIAL}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("n", [17, 64, 150])
@pytest.mark.parametrize("keep_rate", [0.1, 0.3, 1.0])
def test_fused_path_equals_the_reference_selection_and_masked_dense_attention(kernel, options, n, keep_rate):
    predictor = random_predictor(n=n, **options)
    q, k, v = qkv(n=n, seed=n)
    with torch.no_grad():
        out, index = fused.sparsifiner_attention(predictor, q, k, v, keep_rate)
    assert index.shape == (2, 3, n - predictor.first_query, num_connections(keep_rate, n))
    assert_same_selection(index, predictor, q, k, keep_rate)
    assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official"])
def test_fused_path_with_token_pruning_positions(kernel, options):
    """After token pruning each example has its own columns of W_down and W_up (one basis per example)."""
    B, n_max, n = 3, 40, 25
    predictor = random_predictor(n=n_max, **options)
    g = torch.Generator().manual_seed(7)
    positions = torch.stack([torch.cat([torch.zeros(1, dtype=torch.long),
                                        torch.randperm(n_max - 1, generator=g)[:n - 1].sort().values + 1])
                             for _ in range(B)])
    q, k, v = qkv(B=B, n=n, seed=3)
    with torch.no_grad():
        out, index = fused.sparsifiner_attention(predictor, q, k, v, 0.2, positions)
    assert_same_selection(index, predictor, q, k, 0.2, positions)
    assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


def test_rows_with_fewer_candidates_than_k_and_all_zero_coefficients(kernel):
    """A sparse basis (|W_up| >= 0.2 keeps ~30%) leaves queries with one or two nonzero coefficients fewer than k
    candidate keys, and a zero query has uniform A_down (1 / n_down = 0.125 <= tau = 0.2): all its coefficients
    are zero, S is 0 for every key and the unthresholded scores T rank them. Both kinds must still get exactly k
    keys, the reference's. Keys of all-zero basis columns tie in S and in T (both 0): the lower index first."""
    n, n_down, keep_rate = 60, 8, 0.5
    predictor = random_predictor(n=n, n_down=n_down, tau=0.2, up_prune=0.2, basis_threshold_abs=True)
    q, k, v = qkv(n=n, seed=11)
    q[:, :, :5] = 0.0
    kk = num_connections(keep_rate, n)
    with torch.no_grad():
        coeff = predictor.coefficients(q, k)
        candidates = ((coeff != 0).float() @ (predictor.sparse_basis(n) != 0).float() > 0).sum(-1)
        assert (coeff[:, :, :5] == 0).all()  # the all-zero rows exist
        assert (candidates[:, :, 5:] < kk).any() and (candidates > 0).any()  # and rows short of candidates
        out, index = fused.sparsifiner_attention(predictor, q, k, v, keep_rate)
    assert_same_selection(index, predictor, q, k, keep_rate)
    assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


@pytest.mark.parametrize("n", [197, 577])
@pytest.mark.parametrize("keep_rate", [0.1, 0.25])
def test_fused_path_with_the_benchmarks_realistic_state(kernel, n, keep_rate):
    """The bench's state (90% of W~_up pruned, 87% of A_down <= tau): most rows have at least k candidate keys
    (S > 0), and every row keeps exactly the reference's keys."""
    q, k, v = qkv(B=1, H=2, n=n, d=64, seed=1)
    predictor, _ = make_predictor(q, k, n_down=32, tau=0.05)
    with torch.no_grad():
        out, index = fused.sparsifiner_attention(predictor, q, k, v, keep_rate)
    assert_same_selection(index, predictor, q, k, keep_rate)
    assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


def hand_predictor(tau):
    """One head, n = 5, n_down = 2. W_down = 0 makes K_down = 0, so A_down = (1/2, 1/2) for every query.
    W_up's rows [0.5, 0, 0.2, 0, 1.0] and [0, 0.75, 0.4, 0.05, 0]; 0.05 < up_prune = 0.1 is pruned."""
    predictor = ConnectivityPredictor(1, 5, n_down=2, tau=tau, up_prune=0.1).eval()
    with torch.no_grad():
        predictor.w_down.zero_()
        predictor.w_up.copy_(torch.tensor([[[0.5, 0.0, 0.2, 0.0, 1.0], [0.0, 0.75, 0.4, 0.05, 0.0]]]))
    return predictor


@pytest.mark.parametrize("tau", [0.4, 0.6], ids=["both coefficients kept", "all coefficients zero"])
@pytest.mark.parametrize("keep_rate, expected", [(0.2, {4}), (0.4, {1, 4}), (0.6, {1, 2, 4}), (0.8, {0, 1, 2, 4})])
def test_selection_by_hand(kernel, tau, keep_rate, expected):
    """Column sums of W~_up: [0.5, 0.75, 0.6, 0, 1.0]. When tau = 0.4 keeps both coefficients (1/2 > 0.4), S is
    1/2 times them, no two equal; when tau = 0.6 zeroes them, S is 0 for every key and T = A_down W~_up, 1/2
    times the column sums, ranks them. Either way the order is 4, 1, 2, 0, 3, and k = ceil(keep_rate * 5) = 1, 2,
    3, 4 keeps its head."""
    predictor = hand_predictor(tau)
    q, k, v = qkv(B=1, H=1, n=5, d=4, seed=2)
    with torch.no_grad():
        out, index = fused.sparsifiner_attention(predictor, q, k, v, keep_rate)
    assert [set(row) for row in index[0, 0].tolist()] == [expected] * 5
    assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


def test_without_a_build_the_fused_path_warns_once_and_runs_the_torch_path(monkeypatch):
    """Simulated missing toolchain: the build raises; kernel="fused" then warns once (not per call) and returns
    what the torch reference path returns. Runs without a compiler too."""
    def no_build():
        raise RuntimeError("Ninja is required to load C++ extensions (simulated)")

    monkeypatch.setattr(fused, "_build", no_build)
    monkeypatch.setattr(fused, "_state", {"module": None, "error": None, "warned": False})
    predictor = random_predictor(n=30, **OFFICIAL)
    q, k, v = qkv(n=30)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="could not be built.*Ninja is required.*torch path"):
        out, index = fused.sparsifiner_attention(predictor, q, k, v, 0.25)
    assert not fused.fused_available()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call must not warn again
        again, _ = fused.sparsifiner_attention(predictor, q, k, v, 0.25)
        expected, expected_index = fused.sparsifiner_attention(predictor, q, k, v, 0.25, kernel="torch")
    assert torch.equal(index, expected_index) and torch.equal(out, expected) and torch.equal(again, expected)
    with pytest.raises(RuntimeError, match="not available.*simulated"):
        fused.fused_sparsifiner_attention(predictor, q, k, v, 0.25)


@pytest.mark.parametrize("change, error, message", [
    (lambda q, k, v: (q.double(), k, v), TypeError, r"float32.*q\.float\(\).*kernel='torch'"),
    (lambda q, k, v: (q[0], k[0], v[0]), ValueError, r"\[B, H, n, d\] \(4 dimensions\)"),
    (lambda q, k, v: (q[:, :2], k[:, :2], v[:, :2]), ValueError, "2 heads but the predictor was built for 3"),
    (lambda q, k, v: (q.requires_grad_(), k, v), RuntimeError, r"no autograd.*torch\.no_grad\(\).*kernel='torch'"),
    (lambda q, k, v: (q[:, :, :5], k, v), ValueError, "same shape"),
], ids=["float64", "3-d", "heads", "grad", "shapes"])
def test_bad_inputs_raise_errors_that_say_how_to_fix_them(change, error, message):
    predictor = random_predictor(n=30)
    q, k, v = change(*(t.clone() for t in qkv(n=30)))
    with pytest.raises(error, match=message):
        fused.sparsifiner_attention(predictor, q, k, v, 0.25)


def test_bad_kernel_predictor_and_length_raise():
    predictor = random_predictor(n=30)
    q, k, v = qkv(n=30)
    with pytest.raises(ValueError, match="kernel must be one of"):
        fused.sparsifiner_attention(predictor, q, k, v, 0.25, kernel="cuda")
    with pytest.raises(TypeError, match="ConnectivityPredictor"):
        fused.sparsifiner_attention(torch.nn.Linear(2, 2), q, k, v, 0.25)
    long_q, long_k, long_v = qkv(n=31)
    with pytest.raises(ValueError, match="at most 30"):
        fused.sparsifiner_attention(predictor, long_q, long_k, long_v, 0.25)
    with pytest.raises(ValueError, match="keep_rate"):
        fused.sparsifiner_attention(predictor, q, k, v, 0.0)


@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official"])
def test_fused_selection_alone_returns_the_same_index(kernel, options):
    predictor = random_predictor(n=50, **options)
    q, k, v = qkv(n=50, seed=4)
    with torch.no_grad():
        index = fused.fused_selection(predictor, q, k, 0.2)
        _, with_attention = fused.fused_sparsifiner_attention(predictor, q, k, v, 0.2)
    assert torch.equal(index, with_attention)
    assert_same_selection(index, predictor, q, k, 0.2)


# slow (about 30 s): compiling the portable build (g++ -O3, no -march=native) is most of it; once per machine
@pytest.mark.slow
def test_the_portable_build_without_avx512_equals_the_reference(kernel):
    """The build without -march=native compiles the plain loops that stand in for the AVX-512 ones on other
    CPUs; it must pass the same checks against the reference (first run: one more compilation, then cached)."""
    portable = fused._build(portable=True)
    cases = [(random_predictor(n=n, **options), qkv(n=n, seed=n)) for n, options in ((64, {}), (150, OFFICIAL))]
    q, k, v = qkv(B=1, H=2, n=577, d=64, seed=1)
    cases.append((make_predictor(q, k, n_down=32, tau=0.05)[0], (q, k, v)))
    for predictor, (q, k, v) in cases:
        for keep_rate in (0.1, 0.5):
            with torch.no_grad():
                out, index = fused.fused_sparsifiner_attention(predictor, q, k, v, keep_rate, module=portable)
            assert_same_selection(index, predictor, q, k, keep_rate)
            assert_output_is_masked_dense_attention(out, index, predictor, q, k, v)


def test_the_kernel_source_is_package_data_so_an_installed_package_can_build_it():
    """The C++ source lives beside the module (csrc/) and pyproject.toml's package-data ships it in a wheel."""
    root = Path(fused.__file__).parent
    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["bab.sparsifiner"]
    for source in fused.SOURCES:
        assert source.is_file(), source
        relative = source.relative_to(root).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), (relative, patterns)
