import pytest
import torch

from bab.core.budget import hard_topk_mask
from bab.heads.encoder import EncoderClassifier, EncoderConfig


def make_model(gates="budget", positions="relative", seed=0, **overrides):
    torch.manual_seed(seed)
    config = EncoderConfig(vocab_size=50, num_classes=3, max_len=24, d_model=32, num_heads=4, num_layers=3,
                           d_ff=64, gates=gates, positions=positions, **overrides)
    model = EncoderClassifier(config).eval()
    if gates is not None:
        with torch.no_grad():
            model.gates.theta.normal_(0, 2)
    return model


def batch(seed=0, B=5, T=20, pad_tail=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (B, T), generator=g)
    if pad_tail:
        ids[0, 15:] = 0  # padding in one row exercises the key-padding mask
    return ids


@pytest.mark.parametrize("positions", ["relative", "sinusoidal", "learned"])
@pytest.mark.parametrize("budget", [0.1, 0.25, 0.5, 0.75, 1.0])
def test_hard_skip_equals_hard_masked(positions, budget):
    model = make_model(positions=positions)
    ids = batch()
    with torch.no_grad():
        masked = model(ids, budget=budget, mode="hard")
        skipped = model(ids, budget=budget, mode="skip")
    torch.testing.assert_close(skipped.logits, masked.logits, rtol=1e-5, atol=1e-5)
    assert float(skipped.cost) == float(masked.cost)


def test_skip_handles_an_emptied_layer_like_the_mask():
    model = make_model()
    mask = torch.ones(3, 4)
    mask[1] = 0  # global top-k may empty a layer
    ids = batch()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mode="skip", head_mask=mask).logits,
                                   model(ids, mode="hard", head_mask=mask).logits, rtol=1e-5, atol=1e-5)


def test_gated_model_with_all_gates_open_equals_dense():
    dense = make_model(gates=None)
    gated = make_model(gates="budget")
    gated.load_state_dict(dense.state_dict(), strict=False)
    ids = batch()
    ones = torch.ones(3, 4)
    with torch.no_grad():
        reference = dense(ids, mode="dense").logits
        torch.testing.assert_close(gated(ids, mode="hard", head_mask=ones).logits, reference)
        torch.testing.assert_close(gated(ids, mode="skip", head_mask=ones).logits, reference, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gated(ids, mode="dense").logits, reference)
        # soft gates saturated at 1: the gated forward pass is the dense one
        gated.gates.theta.fill_(60.0)
        out = gated(ids, budget=1.0, mode="soft")
        torch.testing.assert_close(out.logits, reference)
        assert float(out.cost) == pytest.approx(1.0)


def test_hard_mode_uses_topk_of_soft_gates_and_reports_exact_cost():
    model = make_model()
    out = model(batch(), budget=0.25, mode="hard")
    expected = hard_topk_mask(model.gates(0.25), 0.25)
    assert torch.equal(out.head_mask.detach(), expected)
    assert float(out.cost) == 3 / 12  # ceil(0.25 * 12) = 3 heads


def test_hard_mode_trains_the_gates_through_straight_through():
    model = make_model().train()
    out = model(batch(), budget=0.5, mode="hard")
    out.logits.sum().backward()
    assert model.gates.theta.grad is not None and model.gates.theta.grad.abs().sum() > 0


def test_soft_cost_is_mean_gate_mass():
    model = make_model()
    out = model(batch(), budget=0.4, mode="soft")
    assert out.cost.detach().item() == pytest.approx(model.gates(0.4).detach().mean().item())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=30, num_heads=4), "divisible"),
        (dict(num_classes=1), "at least 2"),
        (dict(vocab_size=0), "positive integer"),
        (dict(dropout=1.5), "dropout"),
        (dict(gates="dynamic"), "gates must be one of"),
        (dict(positions="rotary"), "positions must be one of"),
        (dict(pad_id=99), "pad_id"),
    ],
)
def test_malformed_config_raises_clear_error(kwargs, message):
    base = dict(vocab_size=50, num_classes=3, max_len=24, d_model=32, num_heads=4, num_layers=2, d_ff=64)
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**{**base, **kwargs})


def test_bad_forward_arguments_raise_clear_errors():
    model = make_model()
    ids = batch()
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        model(ids, budget=1.5, mode="soft")
    with pytest.raises(ValueError, match="needs a budget"):
        model(ids, mode="soft")
    with pytest.raises(ValueError, match="mode must be one of"):
        model(ids, budget=0.5, mode="sparse")
    with pytest.raises(ValueError, match="shape"):
        model(ids, mode="hard", head_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="binary"):
        model(ids, mode="hard", head_mask=torch.full((3, 4), 0.5))
    with pytest.raises(ValueError, match="exceeds max_len"):
        model(torch.ones(2, 30, dtype=torch.long), mode="dense")
    with pytest.raises(ValueError, match="no gates"):
        make_model(gates=None)(ids, budget=0.5, mode="soft")
