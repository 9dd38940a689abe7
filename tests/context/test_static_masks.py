"""Static sparse baselines: the masks against hand-written ones, the matching of sparsity, use in transformers'
GPT-2 and Llama through ``lm_forward(model, ids, prune=False, attn_mask=mask)``, and training under a mask
(``train_lm(..., attn_mask=mask)``) against a written-out masked attention."""

import math

import pytest
import tiny_decoders
import torch
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

from bab.context.interaction import PruningConfig
from bab.context.lm import lm_forward
from bab.context.static_masks import (
    local_window_mask,
    match_stride,
    match_window,
    matched_size,
    pattern_mask,
    pruned_fraction,
    static_mask,
    strided_mask,
)
from bab.context.train import LMObjective, LMTrainConfig, random_batch, train_lm
from bab.core.losses import next_token_ce


def test_local_window_is_the_hand_written_band():
    expected = torch.tensor([[1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0],
                             [0, 1, 1, 0, 0],
                             [0, 0, 1, 1, 0],
                             [0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(local_window_mask(5, 2), expected)
    # 10 pairs k > j, 4 of them at distance 1 kept
    assert pruned_fraction(expected) == pytest.approx(6 / 10)


def test_strided_is_the_hand_written_pattern():
    # stride 2: the last 2 tokens (distances 0, 1) and every even distance
    expected = torch.tensor([[1, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0],
                             [0, 1, 1, 1, 0, 0],
                             [1, 0, 1, 1, 1, 0],
                             [0, 1, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(strided_mask(6, 2), expected)
    # stride 3 at T = 7: distances 1, 2 kept (6 + 5 pairs) and 3, 6 (4 + 1 pairs) of the 21 pairs k > j
    assert pruned_fraction(strided_mask(7, 3)) == pytest.approx(1 - 16 / 21)


def test_matching_picks_the_pattern_closest_to_the_requested_fraction():
    T = 64
    for fraction in (0.0, 0.3, 0.5, 0.8, 0.95):
        w, s = match_window(T, fraction), match_stride(T, fraction)
        got_w = pruned_fraction(local_window_mask(T, w))
        got_s = pruned_fraction(strided_mask(T, s))
        # no other window / stride comes closer (checked by building every mask)
        assert all(abs(got_w - fraction) <= abs(pruned_fraction(local_window_mask(T, c)) - fraction) + 1e-12
                   for c in range(1, T + 1))
        assert all(abs(got_s - fraction) <= abs(pruned_fraction(strided_mask(T, c)) - fraction) + 1e-12
                   for c in range(1, T + 1))
    assert match_window(T, 0.0) == T  # the full causal mask
    assert abs(pruned_fraction(static_mask("local", 256, 0.8)) - 0.8) < 0.01


def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="window must be >= 1"):
        local_window_mask(8, 0)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        match_window(8, 1.0)
    with pytest.raises(ValueError, match="kind"):
        static_mask("dilated", 8, 0.5)


quiet_transformers = tiny_decoders.quiet_transformers


def tiny_llama():
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                        max_position_embeddings=32, **tiny_decoders.NO_SPECIAL))


BUILDS = {"gpt2": tiny_decoders.tiny_gpt2, "llama": tiny_llama}


def build_model(kind):
    torch.manual_seed(0)
    return BUILDS[kind]().eval()


REFERENCE_KEEP = []  # the bool [B, T, T] the written-out attention lets each query see, in every layer


def eager_masked_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """softmax(q k^T * scaling) v over the pairs REFERENCE_KEEP[0] allows AND causal, key/value heads repeated for
    grouped-query attention; transformers' own mask is ignored. query [B, H, T, Dh] -> [B, T, H, Dh]."""
    T = query.shape[2]
    keep = REFERENCE_KEEP[0] & torch.ones(T, T, dtype=torch.bool).tril()
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    weights = ((query @ key.transpose(-1, -2)) * scaling).masked_fill(~keep[:, None], -math.inf).softmax(dim=-1)
    return (weights @ value).transpose(1, 2), None


def reference_logits(kind, ids, keep):
    """The same weights (same seed) run through the written-out attention restricted to ``keep`` [B, T, T]."""
    AttentionInterface.register("bab_test_static_eager", eager_masked_attention)
    model = build_model(kind)
    model.set_attn_implementation("bab_test_static_eager")
    REFERENCE_KEEP[:] = [keep]
    try:
        with torch.no_grad():
            return model(ids, use_cache=False).logits
    finally:
        REFERENCE_KEEP.clear()


@pytest.mark.parametrize("kind", BUILDS)
def test_a_static_mask_in_the_forward_equals_attention_restricted_by_hand(kind):
    """With a local window of 1 every token sees only itself: the output at k cannot depend on tokens j < k."""
    model = build_model(kind)
    ids = torch.randint(0, 50, (1, 12))
    changed = ids.clone()
    changed[0, :6] = (ids[0, :6] + 1) % 50
    mask = local_window_mask(12, 1)
    with torch.no_grad():
        a = lm_forward(model, ids, prune=False, attn_mask=mask).logits
        b = lm_forward(model, changed, prune=False, attn_mask=mask).logits
        full_a, full_b = model(ids).logits, model(changed).logits
        assert torch.allclose(a[:, 6:], b[:, 6:], atol=1e-6)  # the window hides the changed tokens
        assert not torch.allclose(full_a[:, 6:], full_b[:, 6:], atol=1e-3)  # the causal model sees them
        # the full causal mask as a static mask is the plain causal forward
        assert torch.allclose(lm_forward(model, ids, prune=False, attn_mask=local_window_mask(12, 12)).logits,
                              full_a, atol=1e-5)
    with pytest.raises(ValueError, match="bool tensor"):
        lm_forward(model, ids, prune=False, attn_mask=torch.ones(12, 12))


@pytest.mark.parametrize("kind", BUILDS)
def test_static_masks_equal_a_written_out_masked_attention(kind):
    """A [T, T] pattern for the batch and a [B, T, T] one per row (local window, strided, a random one) against the
    plain decoder's weights run through an eager attention that applies the pattern AND causality itself."""
    model = build_model(kind)
    T = 16
    ids = torch.randint(0, 50, (3, T), generator=torch.Generator().manual_seed(1))
    random_pattern = (torch.rand(T, T, generator=torch.Generator().manual_seed(2)) < 0.5) | torch.eye(T).bool()
    per_row = torch.stack([local_window_mask(T, 3), strided_mask(T, 4), random_pattern])  # [B, T, T]
    with torch.no_grad():
        dense = model(ids).logits
        for mask, keep in ((strided_mask(T, 3), strided_mask(T, 3).expand(3, T, T)), (per_row, per_row)):
            got = lm_forward(model, ids, prune=False, attn_mask=mask).logits
            assert (got - reference_logits(kind, ids, keep)).abs().max() < 1e-5
            assert (got - dense).abs().max() > 1e-3  # the pattern matters


def test_a_static_mask_is_refused_on_top_of_learned_pruning():
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=4))
    ids = torch.randint(0, 50, (1, 8))
    with pytest.raises(ValueError, match="baseline of its own"):
        lm_forward(model, ids, attn_mask=local_window_mask(8, 2))
    lm_forward(model, ids, prune=False, attn_mask=local_window_mask(8, 2))  # with pruning off it is the baseline


# ---------------------------------------------------------------------------------------------- training under a mask


def _training_setup(kind):
    """A tiny decoder of ``kind``, a token stream and a static pattern mixing a window and a stride."""
    T = 16
    ids = torch.randint(0, 50, (400,), generator=torch.Generator().manual_seed(3))
    mask = strided_mask(T, 4) if kind == "gpt2" else local_window_mask(T, 3)
    config = LMTrainConfig(objective="lm", steps=4, batch_size=3, context=T, lr=3e-3, warmup_fraction=0.0)
    return ids, mask, config


@pytest.mark.parametrize("kind", BUILDS)
def test_training_under_a_static_mask_has_the_gradients_of_an_attention_that_never_sees_the_masked_pairs(kind):
    """One training batch: the loss and every parameter's gradient of the objective step under ``attn_mask`` equal
    those of the same weights run through a written-out attention restricted to the pattern, so no masked (query,
    key) pair enters the loss; without the mask they differ."""
    ids, mask, config = _training_setup(kind)
    x, y = random_batch(ids, config.batch_size, config.context, torch.Generator().manual_seed(0))
    objective = LMObjective(config, ids, log_every=1, attn_mask=mask)

    def gradients(model, step):
        model.train()
        loss, _ = step(model)
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}

    loss, grads = gradients(build_model(kind), lambda m: objective.step(m, None, (x, y), None, 0))
    AttentionInterface.register("bab_test_static_eager", eager_masked_attention)
    reference = build_model(kind)
    reference.set_attn_implementation("bab_test_static_eager")
    REFERENCE_KEEP[:] = [mask.expand(config.batch_size, -1, -1)]
    try:
        ref_loss, ref_grads = gradients(reference, lambda m: (next_token_ce(m(x, use_cache=False).logits, y), None))
    finally:
        REFERENCE_KEEP.clear()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert set(grads) == set(ref_grads)
    for name, grad in grads.items():
        assert torch.allclose(grad, ref_grads[name], atol=1e-6, rtol=1e-4), name
    unmasked, _ = gradients(build_model(kind), lambda m: LMObjective(config, ids, 1).step(m, None, (x, y), None, 0))
    assert abs(unmasked.item() - loss.item()) > 1e-4  # the pattern matters


@pytest.mark.parametrize("kind", BUILDS)
def test_train_lm_under_a_static_mask_trains_as_the_written_out_masked_attention(kind):
    """Whole runs of ``train_lm``: under ``attn_mask`` the per-step losses and the trained weights follow those of
    the same run on a model whose own attention is restricted to the pattern by hand (no mask passed)."""
    ids, mask, config = _training_setup(kind)
    model = build_model(kind)
    history = train_lm(model, ids, config, progress=False, log_every=1, attn_mask=mask).history
    AttentionInterface.register("bab_test_static_eager", eager_masked_attention)
    reference = build_model(kind)
    reference.set_attn_implementation("bab_test_static_eager")
    REFERENCE_KEEP[:] = [mask.expand(config.batch_size, -1, -1)]
    try:
        ref_history = train_lm(reference, ids, config, progress=False, log_every=1).history
    finally:
        REFERENCE_KEEP.clear()
    assert [h["train_ce"] for h in history] == pytest.approx([h["train_ce"] for h in ref_history], rel=1e-4)
    assert len(history) == config.steps
    reference_weights = reference.state_dict()
    for name, weight in model.state_dict().items():
        assert torch.allclose(weight, reference_weights[name], atol=1e-4), name
    plain = train_lm(build_model(kind), ids, config, progress=False, log_every=1).history
    assert abs(plain[0]["train_ce"] - history[0]["train_ce"]) > 1e-4  # trained without the mask: another loss


def test_a_training_mask_must_fit_the_windows_and_the_plain_objective():
    ids = torch.randint(0, 50, (200,))
    with pytest.raises(ValueError, match=r"\[context, context\] = \[16, 16\]"):
        train_lm(build_model("gpt2"), ids, LMTrainConfig(steps=1, context=16), attn_mask=local_window_mask(8, 2))
    with pytest.raises(ValueError, match="objective 'lm'"):
        train_lm(tiny_decoders.tiny_gpt2(PruningConfig(r=4)), ids,
                 LMTrainConfig(objective="context_pruning", steps=1, context=16), attn_mask=local_window_mask(16, 2))


def test_a_pattern_is_named_by_its_kind_and_size_and_matched_by_its_fraction():
    assert torch.equal(pattern_mask("local", 10, 3), local_window_mask(10, 3))
    assert torch.equal(pattern_mask("strided", 10, 3), strided_mask(10, 3))
    assert matched_size("local", 64, 0.5) == match_window(64, 0.5)
    assert matched_size("strided", 64, 0.5) == match_stride(64, 0.5)
    with pytest.raises(ValueError, match="kind"):
        pattern_mask("dilated", 10, 3)
    with pytest.raises(ValueError, match="kind"):
        matched_size("dilated", 10, 0.5)
