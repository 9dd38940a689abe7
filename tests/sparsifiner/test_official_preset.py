"""The official code's predictor as options (bab.sparsifiner.predictor.ConnectivityConfig): a basis shared by the
heads, the proj_c_q / proj_c_k maps, phase 1 on A_down W_up, phase-2 predictor training, and the official() preset.

Every option is held to a reference written out below as loops over examples and heads (and layers, in the ViT):
one plain float64 matmul per equation, the Linear maps as x @ W^T + b, the ranking rule as a Python sort."""

import math
import shutil
from dataclasses import asdict

import pytest
import torch
from torch.utils.data import TensorDataset

from bab.core.runs import config_difference
from bab.sparsifiner import fused
from bab.sparsifiner.attach import predictors
from bab.sparsifiner.predictor import ConnectivityConfig, ConnectivityPredictor, num_connections
from bab.sparsifiner.train import ViTTrainConfig, train_vit, trainable_parameters
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward

HAS_COMPILER = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))

# ----------------------------------------------------------------------------- the reference


def reference(predictor, q, k, keep_rate, positions=None):
    """{"a_down", "coefficients", "scores", "phase1_scores": [B, H, n_q, .] float64, "index": {(b, h): [set]}}
    computed one example and one head at a time from the predictor's weights."""
    B, H, n, d = q.shape
    first = 1 if predictor.cls_dense else 0
    shared = predictor.basis == "shared"
    kk = num_connections(keep_rate, n)
    out = {name: torch.zeros(B, H, n - first, width, dtype=torch.float64)
           for name, width in (("a_down", predictor.n_down), ("coefficients", predictor.n_down), ("scores", n),
                               ("phase1_scores", n))}
    out["index"] = {}
    for b in range(B):
        columns = torch.arange(n) if positions is None else positions[b]
        for h in range(H):
            q_bh, k_bh = q[b, h].double(), k[b, h].double()  # [n, d]
            if predictor.proj_c_q is not None:  # the same Linear(d -> d // 2) for every head
                q_bh = q_bh @ predictor.proj_c_q.weight.double().T + predictor.proj_c_q.bias.double()
                k_bh = k_bh @ predictor.proj_c_k.weight.double().T + predictor.proj_c_k.bias.double()
            width = q_bh.shape[1]
            scale = 1 / math.sqrt(width if predictor.predictor_scale == "head_dim" else H)
            g = 0 if shared else h  # the layer's one basis, or head h's own
            w_down = predictor.w_down[g][:, columns].double()  # [n_down, n]
            a_down = torch.softmax(q_bh[first:] @ (w_down @ k_bh).T * scale, dim=-1)  # [n_q, n_down]
            kept = torch.zeros_like(a_down, dtype=torch.bool)
            for i in range(n - first):
                if predictor.coefficient_rule == "topm":
                    kept[i, torch.topk(a_down[i], predictor.top_m).indices] = True
                else:
                    kept[i] = a_down[i] > predictor.tau
            coeff = a_down * kept
            w_up = predictor.w_up[g][:, columns].double()  # [n_down, n], signed
            magnitude = w_up.abs() if predictor.basis_threshold_abs else w_up
            basis = magnitude * (magnitude.abs() >= predictor.up_prune)
            out["a_down"][b, h], out["coefficients"][b, h] = a_down, coeff
            out["scores"][b, h] = coeff @ basis
            out["phase1_scores"][b, h] = a_down @ w_up if predictor.phase1_scores == "raw" else coeff @ basis
            scores, ties = summed_over_m(coeff, basis), summed_over_m(a_down, basis)
            out["index"][b, h] = [set(sorted(range(n), key=lambda j: (-scores[i][j], -ties[i][j], j))[:kk])
                                  for i in range(n - first)]
    return out


def summed_over_m(weights, basis):
    """weights [n_q, n_down] times basis [n_down, n] in float64, one basis row at a time in increasing m."""
    out = torch.zeros(weights.shape[0], basis.shape[1], dtype=torch.float64)
    for m in range(basis.shape[0]):
        out = out + weights[:, m:m + 1] * basis[m:m + 1]
    return out.tolist()


def index_sets(index):
    B, H = index.shape[:2]
    return {(b, h): [set(row) for row in index[b, h].tolist()] for b in range(B) for h in range(H)}


def random_predictor(H=3, n=20, d=8, **options):
    """Signed random W_up (so |W_up| and W_up differ) and projections far from their tiny init, in float64."""
    torch.manual_seed(0)
    options = {"n_down": 5, "tau": 0.1, "up_prune": 0.05, **options}
    predictor = ConnectivityPredictor(H, n, head_dim=d, **options).eval()
    with torch.no_grad():
        predictor.w_up.copy_(torch.randn_like(predictor.w_up) * 0.2)
        if predictor.proj_c_q is not None:
            for linear in (predictor.proj_c_q, predictor.proj_c_k):
                linear.weight.copy_(torch.randn_like(linear.weight))
                linear.bias.copy_(torch.randn_like(linear.bias))
    return predictor.double()


def inputs(with_positions, B=4, H=3, n_max=20, n=12, d=8):
    g = torch.Generator().manual_seed(5)
    length = n if with_positions else n_max
    q, k = (torch.randn(B, H, length, d, generator=g, dtype=torch.float64) for _ in range(2))
    if not with_positions:
        return q, k, None
    patches = [torch.randperm(n_max - 1, generator=g)[:n - 1].sort().values + 1 for _ in range(B)]
    return q, k, torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), p]) for p in patches])


def assert_matches_reference(predictor, q, k, positions, keep_rate=0.3):
    ours = predictor(q, k, keep_rate, positions, with_scores=True)
    expected = reference(predictor, q, k, keep_rate, positions)
    a_down = predictor.low_rank_attention(q, k, positions)
    torch.testing.assert_close(a_down, expected["a_down"], rtol=0, atol=1e-12)
    for name in ("coefficients", "scores", "phase1_scores"):
        torch.testing.assert_close(ours[name], expected[name], rtol=0, atol=1e-12)
    assert index_sets(ours["index"]) == expected["index"]
    return ours, expected


# ----------------------------------------------------------------------------- each option against the loop


OPTION_CASES = {
    "shared basis": dict(basis="shared"),
    "connectivity projections": dict(connectivity_projections=True),
    "raw phase-1 scores": dict(phase1_scores="raw"),
    "shared basis, projections, raw phase 1": dict(basis="shared", connectivity_projections=True,
                                                   phase1_scores="raw"),
    "official preset": asdict(ConnectivityConfig.official(n_down=5, top_m=2, tau=0.1, up_prune=0.05)),
}


@pytest.mark.parametrize("with_positions", [False, True], ids=["all tokens", "token-pruning positions"])
@pytest.mark.parametrize("options", list(OPTION_CASES.values()), ids=list(OPTION_CASES))
def test_each_option_equals_the_loop_over_examples_and_heads(options, with_positions):
    predictor = random_predictor(**options)
    q, k, positions = inputs(with_positions)
    ours, _ = assert_matches_reference(predictor, q, k, positions)
    assert ours["index"].shape == (4, 3, 12 - predictor.first_query if with_positions else 20 - predictor.first_query,
                                   num_connections(0.3, 12 if with_positions else 20))


def test_a_shared_basis_is_one_pair_per_layer_that_every_head_uses():
    shared = random_predictor(basis="shared")
    assert shared.w_down.shape == shared.w_up.shape == (1, 5, 20) and shared.num_heads == 3
    # the same connectivity as a per-head predictor whose heads all hold that one pair
    per_head = random_predictor()
    with torch.no_grad():
        per_head.w_down.copy_(shared.w_down.expand(3, -1, -1))
        per_head.w_up.copy_(shared.w_up.expand(3, -1, -1))
    for with_positions in (False, True):
        q, k, positions = inputs(with_positions)
        a, b = shared(q, k, 0.25, positions, with_scores=True), per_head(q, k, 0.25, positions, with_scores=True)
        torch.testing.assert_close(a["scores"], b["scores"], rtol=0, atol=1e-12)
        assert index_sets(a["index"]) == index_sets(b["index"])
    # a per-head predictor whose heads differ does not: the option changes the connectivity
    q, k, _ = inputs(False)
    assert index_sets(random_predictor()(q, k, 0.25)["index"]) != index_sets(shared(q, k, 0.25)["index"])


def test_the_connectivity_projections_have_the_official_shape_bias_and_init():
    torch.manual_seed(0)
    predictor = ConnectivityPredictor(4, 30, n_down=6, connectivity_projections=True, head_dim=16)
    for linear in (predictor.proj_c_q, predictor.proj_c_k):
        assert linear.weight.shape == (8, 16) and linear.bias.shape == (8,)  # Linear(d -> d // 2) with bias
        assert torch.all(linear.bias == 0)
        assert linear.weight.abs().max() <= 2.0  # truncated normal (timm's trunc_normal_, bounds +-2)
        assert 0.01 < float(linear.weight.detach().std()) < 0.03  # std 0.02
    # they learn: the phase-1 scores depend on them
    q, k = torch.randn(2, 4, 30, 16), torch.randn(2, 4, 30, 16)
    predictor(q, k, 0.25, with_scores=True)["phase1_scores"].square().sum().backward()
    assert predictor.proj_c_q.weight.grad.abs().sum() > 0 and predictor.proj_c_k.bias.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"need head_dim=<d >= 2>"):
        ConnectivityPredictor(4, 30, connectivity_projections=True)
    with pytest.raises(ValueError, match="widen the model or turn them off"):
        ViTClassifierConfig(hidden_size=4, num_heads=4,
                            connectivity=ConnectivityConfig(n_down=8, connectivity_projections=True))


def test_raw_phase1_scores_are_the_unthresholded_coefficients_times_the_signed_unpruned_basis():
    """A hand-computed case: one head, n = 3, n_down = 2, d = 1, every coefficient and basis entry visible."""
    predictor = ConnectivityPredictor(1, 3, n_down=2, tau=0.3, up_prune=0.5, basis_threshold_abs=True,
                                      phase1_scores="raw").double().eval()
    with torch.no_grad():
        predictor.w_down.copy_(torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]], dtype=torch.float64))
        predictor.w_up.copy_(torch.tensor([[[-1.0, 0.2, 2.0], [0.4, -3.0, 0.1]]], dtype=torch.float64))
    q = torch.tensor([0.0, math.log(3.0), 0.0], dtype=torch.float64).view(1, 1, 3, 1)
    k = torch.ones(1, 1, 3, 1, dtype=torch.float64)
    # K_down = [1, 0]; logits of query i = [q_i, 0] (scale 1/sqrt(1)): A_down rows [.5 .5], [.75 .25], [.5 .5]
    a_down = torch.tensor([[0.5, 0.5], [0.75, 0.25], [0.5, 0.5]], dtype=torch.float64)
    out = predictor(q, k, 1 / 3, with_scores=True)
    raw = a_down @ torch.tensor([[-1.0, 0.2, 2.0], [0.4, -3.0, 0.1]], dtype=torch.float64)  # signed, unpruned
    coeff = a_down * (a_down > 0.3)  # all but the 0.25 survive tau
    sparse = coeff @ torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=torch.float64)  # |W_up| >= 0.5
    torch.testing.assert_close(out["phase1_scores"][0, 0], raw, rtol=0, atol=1e-12)
    torch.testing.assert_close(out["scores"][0, 0], sparse, rtol=0, atol=1e-12)
    assert out["index"][0, 0].tolist() == [[1], [2], [1]]  # ranked by S: [.5 1.5 1], [.75 0 1.5], [.5 1.5 1]
    # the signed basis gets a gradient everywhere, the pruned entries included (the sparse one only where kept)
    out["phase1_scores"].sum().backward()
    assert torch.all(predictor.w_up.grad != 0)


def test_raw_phase1_scores_do_not_change_the_connections():
    q, k, positions = inputs(True)
    raw, sparse = random_predictor(phase1_scores="raw"), random_predictor()
    a, b = raw(q, k, 0.25, positions, with_scores=True), sparse(q, k, 0.25, positions, with_scores=True)
    assert torch.equal(a["index"], b["index"]) and torch.equal(a["scores"], b["scores"])
    assert not torch.allclose(a["phase1_scores"], b["phase1_scores"])
    assert b["phase1_scores"] is b["scores"]  # the default distils S itself


# ----------------------------------------------------------------------------- the preset and the cache keys


def test_the_official_preset_turns_on_every_official_part():
    official = ConnectivityConfig.official()
    assert (official.n_down, official.tau, official.up_prune) == (32, 0.05, 2e-2)
    assert official.cls_dense and official.basis_threshold_abs and official.connectivity_projections
    assert (official.coefficients, official.top_m, official.predictor_scale) == ("topm", 8, "num_heads")
    assert (official.basis, official.phase1_scores) == ("shared", "raw")
    small = ConnectivityConfig.official(n_down=8, top_m=2, basis="per_head")
    assert (small.n_down, small.top_m, small.basis, small.cls_dense) == (8, 2, "per_head", True)
    # the paper-text default stays the default
    default = ConnectivityConfig()
    assert (default.cls_dense, default.coefficients, default.basis_threshold_abs, default.predictor_scale) == (
        False, "threshold", False, "head_dim")
    assert (default.basis, default.connectivity_projections, default.phase1_scores) == ("per_head", False, "sparse")
    with pytest.raises(TypeError, match=r"unknown fields \['topm'\]"):
        ConnectivityConfig.official(topm=2)
    with pytest.raises(ValueError, match=r"top_m must be an integer in \[1, n_down = 4\]"):
        ConnectivityConfig.official(n_down=4)  # the official top 8 needs n_down >= 8
    with pytest.raises(ValueError, match="basis must be one of"):
        ConnectivityConfig(basis="per_layer")
    with pytest.raises(ValueError, match="phase1_scores must be one of"):
        ConnectivityConfig(phase1_scores="signed")
    with pytest.raises(TypeError, match="connectivity_projections must be True or False"):
        ConnectivityConfig(connectivity_projections=1)


def test_configs_are_keyed_by_their_difference_from_the_defaults():
    assert config_difference(ViTClassifierConfig()) == {}
    assert config_difference(ViTClassifierConfig(connectivity=ConnectivityConfig())) == {"connectivity": {}}
    for name, value in (("basis", "shared"), ("connectivity_projections", True), ("phase1_scores", "raw")):
        keyed = config_difference(ViTClassifierConfig(connectivity=ConnectivityConfig(**{name: value})))
        assert keyed == {"connectivity": {name: value}}
    assert config_difference(ViTTrainConfig(objective="joint", joint_predictor=True, lambda_attn_joint=0.5)) == {
        "objective": "joint", "joint_predictor": True, "lambda_attn_joint": 0.5}


# ----------------------------------------------------------------------------- in the ViT, layer by layer

TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)
OFFICIAL_TINY = asdict(ConnectivityConfig.official(n_down=4, top_m=2))


def tiny(**extra):
    torch.manual_seed(0)
    return build_vit(ViTClassifierConfig(**TINY, **extra)).eval()


def is_predictor(name: str) -> bool:
    """Whether a parameter name is a connectivity predictor's (each layer's attention holds one)."""
    return ".attention.connectivity_predictor." in name


def official_tiny():
    """A tiny ViT with the official preset, signed random W_up and projections far from their init."""
    model = tiny(connectivity=ConnectivityConfig(**OFFICIAL_TINY))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for predictor in predictors(model):
            predictor.w_up.copy_(torch.randn(predictor.w_up.shape, generator=g) * 0.2)
            for linear in (predictor.proj_c_q, predictor.proj_c_k):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=g))
    return model


def pixels(n=3, seed=1):
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def queries_keys_of(model, x, **forward):
    """The forward's output and each layer's q, k [B, H, n, d] as that forward computed them (hooks)."""
    B, H = x.shape[0], model.config.num_attention_heads
    captured, hooks = [], []
    for layer in model.vit.layers:
        for proj in (layer.attention.q_proj, layer.attention.k_proj):
            hooks.append(proj.register_forward_hook(
                lambda m, i, o: captured.append(o.view(B, o.shape[1], H, -1).transpose(1, 2))))
    try:
        out = vit_forward(model, x, **forward)
    finally:
        for hook in hooks:
            hook.remove()
    return out, list(zip(captured[0::2], captured[1::2], strict=True))


def test_the_official_preset_in_the_vit_equals_the_loop_in_every_layer():
    model = official_tiny()
    with torch.no_grad():
        for rate in (0.5, 0.25):
            out, layer_qk = queries_keys_of(model, pixels(), attention="sparse", keep_rate=rate,
                                            return_internals=True)
            for predictor, layer, (q, k) in zip(predictors(model), out.layers, layer_qk, strict=True):
                assert predictor.w_up.shape[0] == 1 and predictor.proj_c_q is not None
                expected = reference(predictor, q, k, rate)
                torch.testing.assert_close(layer["coefficients"].double(), expected["coefficients"], rtol=0,
                                           atol=1e-6)
                assert index_sets(layer["index"]) == expected["index"]
            masked = vit_forward(model, pixels(), attention="masked", keep_rate=rate)
            torch.testing.assert_close(out.logits, masked.logits, atol=1e-5, rtol=1e-5)


def test_the_fused_core_runs_the_official_preset():
    """The fused kernel takes A_down from the predictor (projections included) and a shared basis repeated per
    head, so it runs every option and selects the sparse core's connections."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH: the fused kernel cannot be built here")
    assert fused.fused_available(), f"the fused kernel failed to build: {fused._state['error']!r}"
    model, x = official_tiny(), pixels()
    with torch.no_grad():
        for rate in (1.0, 0.5, 0.25, 0.1):
            by_kernel = vit_forward(model, x, attention="fused", keep_rate=rate, return_internals=True)
            sparse = vit_forward(model, x, attention="sparse", keep_rate=rate, return_internals=True)
            torch.testing.assert_close(by_kernel.logits, sparse.logits, atol=1e-5, rtol=1e-5)
            first, reference_layer = by_kernel.layers[0], sparse.layers[0]
            assert torch.equal(first["index"].sort(-1).values, reference_layer["index"].sort(-1).values)
        # with token-pruning positions, per predictor
        predictor = random_predictor(**OPTION_CASES["official preset"]).float()
        q, k, positions = (t.float() if t.is_floating_point() else t for t in inputs(True))
        result = fused.fused_inference(predictor, q, k, k, 0.25, positions)
        assert index_sets(result["index"]) == index_sets(predictor(q, k, 0.25, positions)["index"])


# ----------------------------------------------------------------------------- training, phase 1 and phase 2


def toy_data(n=32):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_phase_one_with_the_official_preset_trains_the_predictor_alone():
    dense = tiny()
    model = tiny(connectivity=ConnectivityConfig(**OFFICIAL_TINY))
    model.load_state_dict(dense.state_dict(), strict=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = train_vit(model, toy_data(), ViTTrainConfig(objective="predictor", epochs=1, batch_size=16, lr=1e-2),
                       progress=False)
    assert math.isfinite(result.history[0]["loss"])
    for name, p in model.named_parameters():
        assert (not torch.equal(p, before[name])) == is_predictor(name), name
    assert any("proj_c_q" in name for name in before)  # the projections are among the trained weights


@pytest.mark.parametrize("lambda_attn_joint", [0.0, 1.0], ids=["paper: lambda_attn 0", "lambda_attn 1"])
def test_joint_phase_two_updates_the_predictor_and_the_default_leaves_it(lambda_attn_joint):
    teacher = tiny()
    runs = {}
    for joint in (False, True):
        model = tiny(connectivity=ConnectivityConfig(**OFFICIAL_TINY))
        model.load_state_dict(teacher.state_dict(), strict=False)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if is_predictor(n)}
        config = ViTTrainConfig(objective="joint", epochs=1, batch_size=16, keep_rates=(0.25, 0.5),
                                joint_predictor=joint, lambda_attn_joint=lambda_attn_joint if joint else 0.0)
        result = train_vit(model, toy_data(), config, teacher=teacher, progress=False)
        assert math.isfinite(result.history[0]["loss"])
        runs[joint] = {n: (before[n], p.detach()) for n, p in model.named_parameters() if n in before}
    assert all(torch.equal(old, new) for old, new in runs[False].values())  # frozen by default
    # every predictor weight moved (but for the projections' zero-initialised biases, which weight decay alone
    # leaves at zero)
    assert all(not torch.equal(old, new) for old, new in runs[True].values() if old.any() or lambda_attn_joint)
    # with the paper's lambda_attn = 0 only AdamW's weight decay moves them: each tensor is scaled as a whole
    # (p <- p (1 - lr_t wd) per step); with a weight on Eq. 10 the gradient moves them otherwise
    assert len(runs[True]) == 2 * 6  # w_down, w_up and both projections' weight and bias, in each of 2 layers
    old, new = runs[True]["vit.layers.0.attention.connectivity_predictor.w_up"]
    ratio = new / old
    assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio), rtol=1e-5) == (lambda_attn_joint == 0.0)


def test_joint_predictor_options_are_phase_twos_and_say_so():
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    groups = trainable_parameters(model, ViTTrainConfig(objective="joint", joint_predictor=True))
    names = {id(p): n for n, p in model.named_parameters()}
    assert any(is_predictor(names[id(p)]) for p in groups[0]["params"])
    with pytest.raises(ValueError, match="phase 2's .objective='joint'., not 'predictor''s"):
        ViTTrainConfig(objective="predictor", joint_predictor=True)
    with pytest.raises(ValueError, match="only learns with joint_predictor=True"):
        ViTTrainConfig(objective="joint", lambda_attn_joint=0.5)
    with pytest.raises(ValueError, match="lambda_attn_joint must be >= 0"):
        ViTTrainConfig(objective="joint", joint_predictor=True, lambda_attn_joint=-1.0)
