import pytest
import torch

from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.gates import hard_topk_mask


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


def _value_heads_zeroed(model, mask):
    """Independent reference for skipping: a copy whose dropped heads output exactly zero.

    A head's output is softmax(...) @ V_h, so zeroing its rows of the value projection (weight
    and bias) zeroes it; the dense forward of that copy is the forward with the heads removed.
    """
    import copy

    reference = copy.deepcopy(model)
    with torch.no_grad():
        for layer, keep in zip(reference.layers, mask, strict=True):
            attn = layer.attn
            D, Dh = attn.out.weight.shape[0], attn.head_dim
            for h in torch.nonzero(keep == 0, as_tuple=True)[0].tolist():
                rows = slice(2 * D + h * Dh, 2 * D + (h + 1) * Dh)
                attn.qkv.weight[rows] = 0
                attn.qkv.bias[rows] = 0
    return reference


@pytest.mark.parametrize("positions", ["relative", "learned"])
def test_skip_equals_dense_with_the_dropped_heads_zeroed(positions):
    model = make_model(positions=positions)
    mask = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 0]])
    ids = batch()
    with torch.no_grad():
        expected = _value_heads_zeroed(model, mask)(ids, mode="dense").logits
        torch.testing.assert_close(model(ids, mode="skip", head_mask=mask).logits, expected, rtol=1e-5, atol=1e-5)
        # the second call reuses the cached slices and must give the same logits
        torch.testing.assert_close(model(ids, mode="skip", head_mask=mask).logits, expected, rtol=1e-5, atol=1e-5)


def test_kept_weights_are_the_kept_heads_rows_and_columns_cached_per_head_set():
    model = make_model()
    attn = model.layers[0].attn
    D, H, Dh = 32, 4, 8
    with torch.no_grad():
        kept = attn.kept_weights((1, 3))
        q, k, v = attn.qkv.weight.view(3, H, Dh, D)[:, [1, 3]]  # written out per head: [2, Dh, D] each
        torch.testing.assert_close(kept.qkv_weight, torch.cat([q.reshape(-1, D), k.reshape(-1, D), v.reshape(-1, D)]))
        torch.testing.assert_close(kept.out_weight, attn.out.weight.view(D, H, Dh)[:, [1, 3]].reshape(D, 2 * Dh))
        torch.testing.assert_close(kept.rel_bias, attn.rel_bias[[1, 3]])
        assert kept.qkv_weight.is_contiguous() and kept.out_weight.is_contiguous()
        assert attn.kept_weights([1, 3]) is kept  # cached: no copy on the next call
        assert attn.kept_weights((0, 3)) is not kept  # another head set, its own slices


def test_skip_cache_follows_weight_updates_and_reloads():
    model = make_model()
    mask = model.head_mask_for(0.5)
    ids = batch()
    with torch.no_grad():
        model(ids, mode="skip", head_mask=mask)  # fill the cache
        for layer in model.layers:  # an in-place update, like an optimizer step
            layer.attn.qkv.weight.mul_(1.5)
            layer.attn.out.weight.add_(0.1)
        torch.testing.assert_close(model(ids, mode="skip", head_mask=mask).logits,
                                   model(ids, mode="hard", head_mask=mask).logits, rtol=1e-5, atol=1e-5)
        model.load_state_dict(make_model(seed=1).state_dict())
        torch.testing.assert_close(model(ids, mode="skip", head_mask=mask).logits,
                                   model(ids, mode="hard", head_mask=mask).logits, rtol=1e-5, atol=1e-5)


def test_skip_with_autograd_slices_afresh_so_gradients_reach_the_full_weights():
    model = make_model()
    mask = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 0]])
    ids = batch()
    with torch.no_grad():
        model(ids, mode="skip", head_mask=mask)  # a cached entry must not leak into the autograd path
    model(ids, mode="skip", head_mask=mask).logits.sum().backward()
    grad = model.layers[0].attn.qkv.weight.grad.view(3, 4, 8, 32)
    assert grad[:, [0, 2]].abs().sum() > 0
    assert torch.all(grad[:, [1, 3]] == 0)  # skipped heads get no gradient


@pytest.mark.parametrize("positions", ["relative", "sinusoidal", "learned"])
@pytest.mark.parametrize("mode, budget", [("dense", None), ("soft", 0.5), ("hard", 0.5), ("skip", 0.25)])
def test_trimmed_batch_gives_each_text_the_logits_it_gets_alone(positions, mode, budget):
    """Reference: every text run by itself at its own length, with no padding and no mask at all."""
    model = make_model(positions=positions)
    ids = batch(B=4, T=24, pad_tail=False)
    lengths = [17, 9, 12, 3]  # the longest is 17: the batch's last 7 columns are padding in every row
    for row, length in enumerate(lengths):
        ids[row, length:] = 0
    with torch.no_grad():
        trimmed = model(ids, budget=budget, mode=mode).logits
        full_width = model(ids, budget=budget, mode=mode, trim_padding=False).logits
        alone = torch.cat([model(ids[row:row + 1, :length], budget=budget, mode=mode).logits
                           for row, length in enumerate(lengths)])
    torch.testing.assert_close(trimmed, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(full_width, alone, rtol=1e-5, atol=1e-5)


def test_trimming_drops_only_columns_that_are_padding_in_every_row():
    model = make_model(positions="learned")
    seen = []
    model.tok_emb.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    ids = batch(B=3, T=24, pad_tail=False)
    ids[:, 10:] = 0
    ids[1, 15] = 7  # a real token after a pad: columns up to 15 must stay
    with torch.no_grad():
        model(ids)
        model(ids, trim_padding=False)
        model(torch.zeros(2, 24, dtype=torch.long))  # nothing but padding: one column is kept
    assert seen == [16, 24, 1]



def _train_steps(model, pad_tail, steps=3):
    """A few AdamW steps in soft mode at varying budgets, the same dropout draws each call; the trained weights."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        torch.manual_seed(100 + step)
        out = model(batch(seed=step, pad_tail=pad_tail), budget=0.3 + 0.2 * step, mode="soft")
        loss = torch.nn.functional.cross_entropy(out.logits, torch.arange(5) % 3) + out.cost
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("positions, dropout, pad_tail", [
    ("relative", 0.0, False), ("relative", 0.0, True), ("relative", 0.1, True),
    ("sinusoidal", 0.1, True), ("sinusoidal", 0.1, False),
])
def test_training_steps_train_the_weights_sdpa_trains_bit_for_bit(monkeypatch, positions, dropout, pad_tail):
    """Training takes ``math_backend_attention`` where SDPA would take its math backend (dropout, the learned
    relative bias); the weights it trains equal, bit for bit, those of the same steps through torch's own SDPA."""
    from bab.heads.encoder import MultiHeadSelfAttention, math_backend_attention, sdpa

    calls = []

    def counted(*args):
        calls.append(1)
        return math_backend_attention(*args)

    monkeypatch.setattr(MultiHeadSelfAttention, "math_attention", staticmethod(counted))
    trained = _train_steps(make_model(positions=positions, dropout=dropout), pad_tail)
    assert calls, "no training step took math_backend_attention"
    monkeypatch.setattr(MultiHeadSelfAttention, "math_attention", staticmethod(sdpa))
    reference = _train_steps(make_model(positions=positions, dropout=dropout), pad_tail)
    for name, weight in trained.items():
        assert torch.equal(weight, reference[name]), name


def test_math_backend_attention_is_sdpa_to_the_bit_with_dropout_or_a_learned_mask():
    from bab.heads.encoder import math_backend_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 3, 9, 8, requires_grad=True) for _ in range(3))
    keep = torch.ones(4, 1, 1, 9, dtype=torch.bool)
    keep[1, ..., 6:] = False  # one row's last keys are padding
    bias = torch.randn(1, 3, 9, 9, requires_grad=True)
    for mask, dropout in ((keep, 0.2), (None, 0.2), (bias.masked_fill(~keep, float("-inf")), 0.0)):
        inputs = (q, k, v, bias) if mask is not None and mask.requires_grad else (q, k, v)
        results = []
        for attend in (math_backend_attention,
                       lambda q, k, v, mask, p: torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, p)):
            torch.manual_seed(1)
            out = attend(q, k, v, mask, dropout)
            results.append((out, *torch.autograd.grad(out.square().sum(), inputs, retain_graph=True)))
        assert all(torch.equal(a, b) for a, b in zip(*results, strict=True)), (mask is None, dropout)
