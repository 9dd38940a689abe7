"""Budgeted head gates on notebook 05's ViT: the heads method's ``GatedHFClassifier`` over ``build_vit``'s model
(transformers' ViT with Sparsifiner attached), forward ``(pixels, budget=, mode=, head_mask=)``, trained by
``bab.heads.train``. Every forward is held to the ViT written out layer by layer (tests/sparsifiner/vit_loop.py)
with each head's slice of the output projection's input scaled (or zeroed) one head at a time."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.utils.data import TensorDataset

from bab.heads.hf_encoder import GatedHFClassifier
from bab.heads.train import HardAdaptation, TrainConfig, train
from bab.sparsifiner.attach import configure, sparsifiner_state
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward
from tests.sparsifiner.vit_loop import predictor_masked_attention, trained_looking, vit_loop

# 8 x 8 images in 2 x 2 patches (17 tokens), 2 layers x 4 heads of width 4: 8 heads to choose from
TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=32)
ATOL = 1e-5


def tiny_vit(**extra):
    """``build_vit``'s model in TINY's shape with trained-looking weights (logits of order one), in eval mode."""
    torch.manual_seed(0)
    return trained_looking(build_vit(ViTClassifierConfig(**TINY, **extra))).eval()


def gated(vit, gates: str | None = "budget") -> GatedHFClassifier:
    model = GatedHFClassifier.from_hf(vit, "tiny-vit", gates=gates).eval()
    if gates is not None:  # spread the gates, so the top-k is decided by them and not by the jitter of the init
        with torch.no_grad():
            model.gates.theta.copy_(torch.randn(2, 4, generator=torch.Generator().manual_seed(4)) * 2)
    return model


def pixels(n=3, seed=1):
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_the_gated_vit_is_an_image_classifier_of_the_vits_shape():
    vit = tiny_vit()
    model = gated(vit)
    c = model.config
    assert (c.model_type, c.num_layers, c.num_heads, c.num_classes, c.pad_id) == ("vit", 2, 4, 10, None)
    assert c.attn_implementation == "bab_sparsifiner" and model.hf is vit
    with torch.no_grad():  # dense mode: every head as it is, the ViT's own forward
        out = model(pixels())
        torch.testing.assert_close(out.logits, vit_loop(vit, pixels())["logits"], atol=ATOL, rtol=0)
        torch.testing.assert_close(out.logits, vit_forward(vit, pixels()).logits, atol=ATOL, rtol=0)
    assert float(out.cost) == 1.0 and out.head_mask is None


def test_an_explicit_head_mask_equals_zeroing_those_heads_slices_of_the_output_projection_input():
    vit = tiny_vit()
    model = gated(vit, gates=None)  # an explicit mask needs no gates
    x = pixels()
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    with torch.no_grad():
        out = model(x, mode="hard", head_mask=mask)
        expected = vit_loop(vit, x, head_weights=mask)
        dense = vit_loop(vit, x)["logits"]
    torch.testing.assert_close(out.logits, expected["logits"], atol=ATOL, rtol=0)
    assert (out.logits - dense).abs().max() > 100 * ATOL  # the masked heads change the answer
    assert float(out.cost) == pytest.approx(5 / 8) and torch.equal(out.head_mask, mask)
    with torch.no_grad():  # every head kept: the dense model
        torch.testing.assert_close(model(x, mode="hard", head_mask=torch.ones(2, 4)).logits, dense, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="head_mask is a hard mask"):
        model(x, mode="soft", head_mask=mask)
    with pytest.raises(ValueError, match="shape"):
        model(x, mode="hard", head_mask=torch.ones(3, 4))
    with pytest.raises(ValueError, match="no gates"):
        model(x, budget=0.5, mode="soft")


@pytest.mark.parametrize("budget", [1.0, 0.75, 0.5, 0.3, 0.1])
def test_hard_mode_keeps_the_ceil_b_heads_with_the_largest_gates_and_cost_is_the_kept_fraction(budget):
    vit = tiny_vit()
    model = gated(vit)
    x = pixels()
    with torch.no_grad():
        out = model(x, budget=budget, mode="hard")
        soft = model.gates(budget)
    # what multiplied the heads: the binary top-k mask (plus g - g of the straight-through, not exactly 0 in float)
    mask = out.head_mask.round()
    torch.testing.assert_close(out.head_mask, mask, atol=1e-6, rtol=0)
    kept = math.ceil(round(budget * 8, 9))
    assert set(mask.unique().tolist()) <= {0.0, 1.0} and int(mask.sum()) == kept
    if kept < 8:  # the kept heads are the ones with the largest gates
        assert soft[mask == 1].min() > soft[mask == 0].max()
    assert torch.equal(model.head_mask_for(budget), mask)
    assert float(out.cost) == pytest.approx(kept / 8)
    with torch.no_grad():
        torch.testing.assert_close(out.logits, vit_loop(vit, x, head_weights=mask)["logits"], atol=ATOL, rtol=0)


def test_soft_mode_scales_each_head_by_its_gate_and_costs_the_mean_gate():
    vit = tiny_vit()
    model = gated(vit)
    x = pixels()
    with torch.no_grad():
        out = model(x, budget=0.4, mode="soft")
        soft = model.gates(0.4)
        expected = vit_loop(vit, x, head_weights=soft)
    torch.testing.assert_close(out.gates, soft)
    torch.testing.assert_close(out.logits, expected["logits"], atol=ATOL, rtol=0)
    assert float(out.cost) == pytest.approx(float(soft.mean()))


def test_head_gates_compose_with_sparsifiner_attention_and_leave_its_settings():
    """The gates act on the output projection's input, whatever core computed the heads: masked Sparsifiner
    attention at keep 0.25 with two heads masked equals the written-out forward with both."""
    vit = tiny_vit(connectivity=ConnectivityConfig(n_down=4))
    model = gated(vit, gates=None)
    configure(vit, core="masked", keep=0.25)
    x = pixels()
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]])
    with torch.no_grad():
        out = model(x, mode="hard", head_mask=mask)
        expected = vit_loop(vit, x, predictor_masked_attention(0.25), head_weights=mask)
    torch.testing.assert_close(out.logits, expected["logits"], atol=ATOL, rtol=0)
    state = sparsifiner_state(vit)
    assert (state.core, state.keep_rate) == ("masked", 0.25)
    for mine, reference in zip(state.layers, expected["layers"], strict=True):  # the same keys (masked: any order)
        assert torch.equal(mine["index"].sort(-1).values, reference["index"].sort(-1).values)
    with torch.no_grad():  # the gates' settings end with the call: the ViT's own forward is ungated again
        torch.testing.assert_close(vit(pixel_values=x).logits,
                                   vit_loop(vit, x, predictor_masked_attention(0.25))["logits"], atol=ATOL, rtol=0)
        assert (out.logits - vit(pixel_values=x).logits).abs().max() > 100 * ATOL


def toy_data(n=32):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_budgeted_training_then_hard_adaptation_moves_the_gates_and_the_weights():
    """bab.heads.train on the gated ViT: "budgeted" (soft gates, b ~ U[0.1, 1]) from a dense warm start, then
    "hard_adapt" (hard top-k heads, straight-through to the gates) distilled from the dense ViT."""
    dense_vit = tiny_vit()
    teacher = GatedHFClassifier.from_hf(copy.deepcopy(dense_vit), "x", gates=None).eval()
    model = gated(dense_vit)
    data = toy_data()
    names = ("gates.theta", "gates.raw_sensitivity")
    backbone = "hf.vit.layers.0.attention.q_proj.weight"
    for config in (TrainConfig(objective="budgeted", epochs=1, batch_size=16, lambda_cost=1.0, gate_lr=1e-1),
                   TrainConfig(objective="hard_adapt", epochs=1, batch_size=16, gate_lr=1e-1,
                               adaptation=HardAdaptation(kd_teacher="dense"))):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        result = train(model, data, config, teacher=teacher if config.objective == "hard_adapt" else None,
                       progress=False)
        assert len(result.history) == 1 and math.isfinite(result.history[0]["loss"]), config.objective
        params = dict(model.named_parameters())
        assert all(not torch.equal(params[n], before[n]) for n in names), config.objective  # the gates learned
        assert not torch.equal(params[backbone], before[backbone]), config.objective  # and the ViT
        assert 0.0 < result.history[0]["cost"] <= 1.0
    # the teacher is a copy: training the student left it alone
    with torch.no_grad():
        torch.testing.assert_close(teacher(pixels()).logits, vit_loop(tiny_vit(), pixels())["logits"], atol=ATOL,
                                   rtol=0)
    with pytest.raises(ValueError, match="needs teacher"):
        train(model, data, TrainConfig(objective="hard_adapt", adaptation=HardAdaptation(kd_teacher="dense")),
              progress=False)
