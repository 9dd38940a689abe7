"""Notebook 05's ViT (bab.sparsifiner.vit: transformers' ViT with Sparsifiner attached, run by ``vit_forward``), its
attention paths, and the notebook-05 training steps. Head gates on this ViT are the heads method's:
tests/sparsifiner/test_vit_head_gates.py."""

import math
import shutil

import pytest
import torch
from torch.utils.data import TensorDataset
from transformers import ViTForImageClassification

from bab.core.losses import attention_distillation_loss, kl_distillation_loss, token_distillation_loss
from bab.sparsifiner import fused
from bab.sparsifiner.attach import predictors
from bab.sparsifiner.attach_tokens import prune_and_fuse
from bab.sparsifiner.attention import ATTENTION_CORES
from bab.sparsifiner.evaluate import (
    attention_core_flops,
    attention_maps,
    evaluate_vit,
    fused_logit_check,
    mhsa_cost_table,
    topk_exact,
)
from bab.sparsifiner.model_bench import set_realistic_model_state
from bab.sparsifiner.predictor import ConnectivityConfig, num_connections
from bab.sparsifiner.train import ViTTrainConfig, train_vit
from bab.sparsifiner.vit import (
    ViTClassifierConfig,
    ViTForward,
    build_vit,
    dense_mhsa_macs,
    num_tokens,
    vit_forward,
)

TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)


def tiny(**extra):
    torch.manual_seed(0)
    return build_vit(ViTClassifierConfig(**TINY, **extra)).eval()


def plain_copy(model, attn_implementation="sdpa"):
    """transformers' own ViT in TINY's shape, not attached, holding ``model``'s backbone weights."""
    plain = ViTForImageClassification(ViTClassifierConfig(**TINY).hf_config()).eval()
    plain.set_attn_implementation(attn_implementation)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(".connectivity_predictor." in k or ".linformer_projection." in k for k in unexpected)
    return plain


def is_predictor(name: str) -> bool:
    """Whether a parameter name is a connectivity predictor's (each layer's attention holds one)."""
    return ".attention.connectivity_predictor." in name


def pixels(n=3, seed=1):
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_equals_transformers_vit_when_sparsity_is_off():
    model = tiny(linformer_len=4, connectivity=ConnectivityConfig(n_down=8))
    x = pixels()
    with torch.no_grad():
        reference = plain_copy(model)(pixel_values=x).logits
        ours = vit_forward(model, x)
        explicit = vit_forward(model, x, return_internals=True)  # the explicit softmax path instead of SDPA
    torch.testing.assert_close(ours.logits, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit.logits, reference, atol=1e-5, rtol=1e-5)
    assert ours.cost == 1.0


def test_transformers_vit_with_eager_attention_agrees_too():
    model = tiny()
    x = pixels()
    with torch.no_grad():
        reference = plain_copy(model, "eager")(pixel_values=x).logits
        torch.testing.assert_close(vit_forward(model, x).logits, reference, atol=1e-5, rtol=1e-5)


def test_keep_rate_one_equals_dense_and_sparse_equals_masked():
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    x = pixels()
    with torch.no_grad():
        dense = vit_forward(model, x).logits
        every_key = vit_forward(model, x, attention="sparse", keep_rate=1.0).logits
        torch.testing.assert_close(every_key, dense, atol=1e-5, rtol=1e-5)
        for rate in (0.5, 0.25, 0.1):
            sparse = vit_forward(model, x, attention="sparse", keep_rate=rate).logits
            masked = vit_forward(model, x, attention="masked", keep_rate=rate).logits
            torch.testing.assert_close(sparse, masked, atol=1e-5, rtol=1e-5)
    assert topk_exact(model, x, 0.25)


def test_cost_falls_with_the_keep_rate():
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    x = pixels()
    with torch.no_grad():
        costs = [vit_forward(model, x, attention="sparse", keep_rate=r).mhsa_macs for r in (1.0, 0.5, 0.25, 0.1)]
    assert costs == sorted(costs, reverse=True) and len(set(costs)) == 4
    n, D = num_tokens(model), model.config.hidden_size
    assert n == 17 and dense_mhsa_macs(model) == 2 * 2 * n * n * D  # 2 layers x (QK^T + AV)


def test_bad_arguments_raise_clear_errors():
    model = tiny()
    x = pixels()
    with pytest.raises(ValueError, match="needs connectivity predictors"):
        vit_forward(model, x, attention="sparse", keep_rate=0.5)
    with pytest.raises(ValueError, match="keep_rate must lie in"):
        vit_forward(tiny(connectivity=ConnectivityConfig(n_down=8)), x, attention="sparse", keep_rate=0.0)
    with pytest.raises(ValueError, match="attention must be one of"):
        vit_forward(model, x, attention="sparsest")
    with pytest.raises(ValueError, match="linformer_len"):
        vit_forward(model, x, attention="linformer")
    with pytest.raises(ValueError, match="multiple of patch_size"):
        ViTClassifierConfig(image_size=9, patch_size=2)
    with pytest.raises(ValueError, match="token_keep"):
        vit_forward(model, x, token_keep=0.0, prune_layers=(0,))


def test_token_pruning_keeps_cls_and_the_most_attended_patches():
    x = torch.arange(5 * 2, dtype=torch.float).view(1, 5, 2)
    cls_attention = torch.tensor([[[0.1, 0.5, 0.05, 0.3, 0.05]]])  # [B=1, H=1, n=5]
    pruned, positions, _ = prune_and_fuse(x, cls_attention, 0.5, fuse=False)
    kept = positions[:, 1:]
    assert kept.tolist() == [[1, 3]]
    torch.testing.assert_close(pruned, x[:, [0, 1, 3]])


def test_token_pruning_in_the_model_shrinks_the_sequence_and_the_cost():
    model = tiny(connectivity=ConnectivityConfig(n_down=2))  # a predictor small enough to pay for itself on 17 tokens
    x = pixels()
    with torch.no_grad():
        out = vit_forward(model, x, token_keep=0.5, prune_layers=(0,))
        combined = vit_forward(model, x, attention="sparse", keep_rate=0.1, token_keep=0.5, prune_layers=(0,))
    assert out.tokens.shape[1] == 1 + math.ceil(0.5 * 16)
    assert combined.tokens.shape == out.tokens.shape
    assert combined.cost < out.cost < 1.0


def test_linformer_path_runs_at_its_cost():
    model = tiny(linformer_len=4)
    with torch.no_grad():
        out = vit_forward(model, pixels(), attention="linformer")
    n, D = num_tokens(model), model.config.hidden_size
    assert out.mhsa_macs == 2 * 4 * n * 4 * D
    assert torch.isfinite(out.logits).all()


def test_distillation_losses_are_zero_at_the_teacher_and_positive_elsewhere():
    a = torch.randn(2, 3, 4)
    assert token_distillation_loss(a, a) == 0 and token_distillation_loss(a + 1, a) > 0
    logits = torch.randn(4, 10)
    assert kl_distillation_loss(logits, logits).abs() < 1e-6 and kl_distillation_loss(-logits, logits) > 0
    probs = torch.softmax(torch.randn(2, 2, 5, 5), -1)
    assert attention_distillation_loss([probs], [probs]) == 0
    with pytest.raises(ValueError, match="one teacher attention map per layer"):
        attention_distillation_loss([probs], [])
    with pytest.raises(ValueError, match="equal shapes"):
        token_distillation_loss(torch.zeros(1, 3, 2), torch.zeros(1, 5, 2))


def toy_data(n=48):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_phase_one_trains_only_the_predictor_and_lowers_the_attention_loss():
    dense = tiny()
    model = tiny(connectivity=ConnectivityConfig(n_down=8, tau=0.05))
    model.load_state_dict(dense.state_dict(), strict=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = toy_data()

    def attention_loss():
        with torch.no_grad():
            out = vit_forward(model, data.tensors[0], with_predictor=True)
        return float(attention_distillation_loss([m["scores"] for m in out.layers], [m["probs"] for m in out.layers]))

    start = attention_loss()
    train_vit(model, data, ViTTrainConfig(objective="predictor", epochs=3, batch_size=16, lr=1e-2), progress=False)
    assert attention_loss() < start
    for name, p in model.named_parameters():
        changed = not torch.equal(p, before[name])
        assert changed == is_predictor(name), name


def test_phase_two_trains_the_backbone_and_freezes_the_predictor():
    teacher = tiny()
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    model.load_state_dict(teacher.state_dict(), strict=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = ViTTrainConfig(objective="joint", epochs=1, batch_size=16, keep_rates=(0.25, 0.5))
    result = train_vit(model, toy_data(), config, teacher=teacher, progress=False)
    assert len(result.history) == 1 and math.isfinite(result.history[0]["loss"])
    for name, p in model.named_parameters():
        changed = not torch.equal(p, before[name])
        assert changed != is_predictor(name), name
    with pytest.raises(ValueError, match="needs teacher"):
        train_vit(model, toy_data(), config, progress=False)


def test_train_config_rejects_bad_keep_rates_and_objectives():
    with pytest.raises(ValueError, match="keep_rate must lie in"):
        ViTTrainConfig(objective="joint", keep_rates=(0.5, 2.0))
    with pytest.raises(ValueError, match="objective must be one of"):
        ViTTrainConfig(objective="sparse")
    for moved in ("budgeted", "heads_hard"):  # head gates on the ViT train with bab.heads.train
        with pytest.raises(ValueError, match="objective must be one of"):
            ViTTrainConfig(objective=moved)


def test_evaluation_and_flop_tables():
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    data = toy_data(20)
    dense = evaluate_vit(model, data)
    sparse = evaluate_vit(model, data, attention="sparse", keep_rate=0.25)
    assert dense["cost"] == 1.0 and 0.0 < sparse["cost"]
    flops = attention_core_flops(model, data.tensors[0][:4])
    n, D = num_tokens(model), model.config.hidden_size
    assert flops["attention_flops"] == pytest.approx(2 * dense_mhsa_macs(model))  # FlopCounterMode: 2 per MAC
    table = mhsa_cost_table(model, (0.5, 0.1), data.tensors[0][:4])
    assert table.shape == (2, 6)
    assert table.connections.tolist() == [num_connections(0.5, n), num_connections(0.1, n)]
    assert table["counted fraction"].iloc[1] < table["counted fraction"].iloc[0]
    assert D == 16


# ----------------------------------------------------------------------------- batch independence, predictor options

OFFICIAL = dict(cls_dense=True, coefficients="topm", top_m=2, basis_threshold_abs=True, predictor_scale="num_heads")


def signed_predictors(model):
    """Random signed W_up (an untrained W_up is all positive), so every option changes the connectivity."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for predictor in predictors(model):
            predictor.w_up.copy_(torch.randn(predictor.w_up.shape, generator=g) * 0.2)
    return model


@pytest.mark.parametrize("pruning", [{}, dict(token_keep=0.5, prune_layers=(0,))], ids=["all tokens", "pruned"])
@pytest.mark.parametrize("attention", ["sparse", "masked"])
@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official options"])
def test_an_images_output_does_not_depend_on_the_other_images_in_its_batch(pruning, attention, options):
    model = signed_predictors(tiny(connectivity=ConnectivityConfig(n_down=4, **options))).double()
    x = pixels(5).double()
    forward = dict(attention=attention, keep_rate=0.25, return_internals=True, **pruning)
    with torch.no_grad():
        alone = [vit_forward(model, x[b:b + 1], **forward) for b in range(5)]
        for order in ([0, 1, 2, 3, 4], [3, 1, 0, 4, 2], [2, 2, 0]):  # shuffled, and different companions
            batch = vit_forward(model, x[order], **forward)
            for slot, b in enumerate(order):
                torch.testing.assert_close(batch.tokens[slot], alone[b].tokens[0], rtol=0, atol=1e-12)
                torch.testing.assert_close(batch.logits[slot], alone[b].logits[0], rtol=0, atol=1e-12)
                for in_batch, by_itself in zip(batch.layers, alone[b].layers, strict=True):
                    # every layer's attention (its output is probs @ V) and its connections
                    torch.testing.assert_close(in_batch["probs"][slot], by_itself["probs"][0], rtol=0, atol=1e-12)
                    assert torch.equal(in_batch["index"][slot].sort(-1).values, by_itself["index"][0].sort(-1).values)


def test_the_official_options_in_the_vit_keep_sparse_equal_to_masked_and_cls_dense():
    model = signed_predictors(tiny(connectivity=ConnectivityConfig(n_down=4, **OFFICIAL)))
    x = pixels()
    n, D = num_tokens(model), model.config.hidden_size
    with torch.no_grad():
        for rate in (0.5, 0.25, 0.1):
            sparse = vit_forward(model, x, attention="sparse", keep_rate=rate, return_internals=True)
            masked = vit_forward(model, x, attention="masked", keep_rate=rate, return_internals=True)
            torch.testing.assert_close(sparse.logits, masked.logits, atol=1e-5, rtol=1e-5)
            k = num_connections(rate, n)
            for predictor, layer in zip(predictors(model), sparse.layers, strict=True):
                kept = (layer["probs"] > 0).sum(-1)  # [B, H, n]
                assert torch.all(kept[:, :, 0] == n) and torch.all(kept[:, :, 1:] == k)  # CLS dense, others k
                assert layer["index"].shape[-2] == n - 1
                attention = 2 * ((n - 1) * k + n) * D  # QK^T and AV: the CLS row over n keys, the others over k
                down = (n + (n - 1)) * 4 * D  # W_down K over n keys, Q K_down^T for the n - 1 predicted queries
                up = predictor.up_projection_macs(layer["coefficients"])
                assert layer["macs"] == pytest.approx(attention + down + up)
        assert topk_exact(model, x, 0.25)
        maps = attention_maps(model, x[:1], query=0, keep_rate=0.25, layers=[0], heads=[0])
        assert maps["mask"][(0, 0)].sum() == n  # the CLS query's mask is every key


def test_phase_one_with_cls_dense_distils_the_predicted_rows_only():
    dense = tiny()
    model = tiny(connectivity=ConnectivityConfig(n_down=8, cls_dense=True))
    model.load_state_dict(dense.state_dict(), strict=False)
    result = train_vit(model, toy_data(16), ViTTrainConfig(objective="predictor", epochs=1, batch_size=16),
                       progress=False)
    assert math.isfinite(result.history[0]["loss"])


@pytest.mark.parametrize("options, message", [
    (dict(coefficients="topk"), "coefficients must be one of"),
    (dict(n_down=4, coefficients="topm"), r"top_m must be an integer in \[1, n_down = 4\]"),  # top_m defaults to 8
    (dict(predictor_scale="d"), "predictor_scale must be one of"),
])
def test_vit_config_rejects_bad_predictor_options(options, message):
    with pytest.raises(ValueError, match=message):
        ViTClassifierConfig(**TINY, connectivity=ConnectivityConfig(**options))


# ----------------------------------------------------------------------------- attention cores by name, ViTForward

def test_the_options_object_and_keywords_are_the_same_call():
    model, x = signed_predictors(tiny(connectivity=ConnectivityConfig(n_down=4))), pixels()
    options = ViTForward(attention="sparse", keep_rate=0.25, return_internals=True)
    with torch.no_grad():
        by_object = vit_forward(model, x, options)
        by_keywords = vit_forward(model, x, attention="sparse", keep_rate=0.25, return_internals=True)
        overridden = vit_forward(model, x, options, keep_rate=0.5)  # keywords replace the object's fields
        at_half = vit_forward(model, x, attention="sparse", keep_rate=0.5)
    assert torch.equal(by_object.logits, by_keywords.logits) and by_object.mhsa_macs == by_keywords.mhsa_macs
    assert torch.equal(overridden.logits, at_half.logits)
    assert sorted(ATTENTION_CORES) == ["dense", "fused", "linformer", "masked", "sparse"]


@pytest.mark.parametrize("options, error, message", [
    (dict(attention="sparsest"), ValueError, r"attention must be one of \('dense', 'sparse', 'masked', 'fused'"),
    (dict(sparse_kernel="cuda"), ValueError, "sparse_kernel must be one of"),
    (dict(attention="fused", token_keep=0.5, prune_layers=(0,)), ValueError, "token pruning needs a full CLS"),
    (dict(attention="linformer", token_keep=0.5, prune_layers=(0,)), ValueError, "token pruning needs a full CLS"),
    (dict(attention="fused", with_predictor=True), ValueError, "use attention='dense' with with_predictor"),
], ids=["name", "sparse_kernel", "fused pruning", "linformer pruning", "fused phase 1"])
def test_forward_options_reject_bad_values_on_their_own(options, error, message):
    with pytest.raises(error, match=message):
        ViTForward(**options)


def test_forward_options_say_what_the_model_lacks():
    model, x = tiny(), pixels()
    with pytest.raises(ValueError, match=r"attention='fused' needs connectivity predictors"):
        vit_forward(model, x, attention="fused")
    with pytest.raises(ValueError, match=r"prune_layers \[2\] outside 0..1"):
        vit_forward(model, x, token_keep=0.5, prune_layers=(2,))
    with pytest.raises(TypeError, match="must be a ViTForward.*attention='masked'"):
        vit_forward(model, x, "masked")  # the attention name where the options object goes
    with pytest.raises(TypeError, match="unexpected keyword argument 'keep'"):
        vit_forward(model, x, keep=0.5)


HAS_COMPILER = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["defaults", "official options"])
def test_the_fused_core_in_the_vit_equals_the_sparse_and_masked_cores(options):
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH: the fused kernel cannot be built here")
    assert fused.fused_available(), f"the fused kernel failed to build: {fused._state['error']!r}"
    model, x = signed_predictors(tiny(connectivity=ConnectivityConfig(n_down=4, **options))), pixels()
    with torch.no_grad():
        for rate in (1.0, 0.5, 0.25, 0.1):
            by_kernel = vit_forward(model, x, attention="fused", keep_rate=rate, return_internals=True)
            sparse = vit_forward(model, x, attention="sparse", keep_rate=rate, return_internals=True)
            masked = vit_forward(model, x, attention="masked", keep_rate=rate)
            torch.testing.assert_close(by_kernel.logits, sparse.logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(by_kernel.logits, masked.logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(by_kernel.tokens, sparse.tokens, atol=1e-5, rtol=1e-5)
            assert by_kernel.mhsa_macs == pytest.approx(sparse.mhsa_macs)
            # layer 0 sees the same q, k: the predictor's own A~_down and the same connections; later layers see
            # the previous layer's outputs, equal only to float rounding
            first, reference = by_kernel.layers[0], sparse.layers[0]
            assert torch.equal(first["coefficients"], reference["coefficients"])
            assert torch.equal(first["index"].sort(-1).values, reference["index"].sort(-1).values)
            for ours, theirs in zip(by_kernel.layers, sparse.layers, strict=True):
                torch.testing.assert_close(ours["coefficients"], theirs["coefficients"], atol=1e-5, rtol=1e-5)
                assert "probs" not in ours  # the kernel never forms the attention matrix
    with pytest.raises(RuntimeError, match=r"without autograd.*torch\.no_grad\(\)"):
        vit_forward(model.train(), x, attention="fused", keep_rate=0.25)



def trained_like(config: ViTClassifierConfig, seed: int = 0) -> ViTForImageClassification:
    """A ViT whose weights look trained rather than freshly initialised, so that a tolerance on its logits means
    something: every linear and patch-embedding weight drawn with std 1 / sqrt(fan in) (HF's init, std 0.02, leaves
    near-uniform attention and logits near 0), layer-norm gains around 1, and every predictor in the core bench's
    realistic state (~90% of the basis pruned, W_down scaled until ~87% of A_down is at or below tau, on the
    queries and keys that layer sees), so each query keeps scattered keys from a sparse basis."""
    torch.manual_seed(seed)
    model = build_vit(config).eval()
    g = torch.Generator().manual_seed(seed)
    predictor_modules = {id(m) for predictor in predictors(model) for m in predictor.modules()}
    with torch.no_grad():
        for module in model.modules():
            if id(module) in predictor_modules:  # the predictors: the realistic state below
                continue
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=g) / math.sqrt(fan_in))
                module.bias.copy_(torch.randn(module.bias.shape, generator=g) * 0.1)
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=g))
        x = torch.randn(4, config.num_channels, config.image_size, config.image_size, generator=g)
        set_realistic_model_state(model, x, seed)
    return model


# notebook 05's shape (28 x 28 images in 4 x 4 patches: n = 50) and the same model on 56 x 56 images (n = 197, DeiT-S's
# sequence length at 224 x 224)
WHOLE_MODEL = dict(patch_size=4, num_channels=1, hidden_size=64, num_layers=4, num_heads=4, intermediate_size=128)
WHOLE_PREDICTOR = dict(n_down=8, tau=0.2, up_prune=0.04)


@pytest.mark.parametrize("options", [{}, OFFICIAL], ids=["paper text", "official options (notebook 05)"])
@pytest.mark.parametrize("image_size, n", [(28, 50), (56, 197)])
def test_the_whole_fused_model_gives_the_masked_models_logits(image_size, n, options):
    """The whole ViT of ``build_vit``, every layer through the fused kernel, against the reference path (dense scores
    masked to the predictor's connections), at the keep rates the paper reports; and ``fused_logit_check`` reports
    the same gaps. Not vacuous: the logits are O(1) and move by far more than 1e-5 from dense at each keep rate."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH: the fused kernel cannot be built here")
    assert fused.fused_available(), f"the fused kernel failed to build: {fused._state['error']!r}"
    config = ViTClassifierConfig(image_size=image_size, **WHOLE_MODEL,
                                 connectivity=ConnectivityConfig(**WHOLE_PREDICTOR, **options))
    assert config.num_tokens == n
    model = trained_like(config)
    x = torch.randn(3, 1, image_size, image_size, generator=torch.Generator().manual_seed(5))
    rates = (0.1, 0.25, 0.5)
    with torch.no_grad():
        dense = vit_forward(model, x).logits
        assert dense.std() > 0.3  # trained-like: logits of order one, so 1e-5 is a tight tolerance
        for rate in rates:
            by_kernel = vit_forward(model, x, attention="fused", keep_rate=rate)
            masked = vit_forward(model, x, attention="masked", keep_rate=rate)
            torch.testing.assert_close(by_kernel.logits, masked.logits, atol=1e-5, rtol=0)
            assert (by_kernel.logits - dense).abs().max() > 1e-2  # the sparsity changes the answer
            assert by_kernel.mhsa_macs == pytest.approx(masked.mhsa_macs)
            gap = (by_kernel.logits - masked.logits).abs().max().item()
            assert fused_logit_check(model, x, [rate]) == {rate: pytest.approx(gap, abs=1e-7)}
    assert set(fused_logit_check(model, x, rates)) == set(rates)


def test_the_fused_core_says_why_when_the_kernel_could_not_be_built(monkeypatch):
    def no_build():
        raise RuntimeError("Ninja is required to load C++ extensions (simulated)")

    monkeypatch.setattr(fused, "_build", no_build)
    monkeypatch.setattr(fused, "_state", {"module": None, "error": None, "warned": False})
    model = tiny(connectivity=ConnectivityConfig(n_down=8))
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"not available.*simulated.*attention='sparse'"):
        vit_forward(model, pixels(), attention="fused", keep_rate=0.25)
