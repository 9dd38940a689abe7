"""Static sparse baselines: the masks against hand-written ones, the matching of sparsity, use in both decoders."""

import pytest
import torch

from bab.context.gpt2 import GPT2LM, GPT2Config
from bab.context.llama import LlamaDecoderConfig, LlamaLM
from bab.context.static_masks import (
    local_window_mask,
    match_stride,
    match_window,
    pruned_fraction,
    static_mask,
    strided_mask,
)


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


@pytest.mark.parametrize("build", [
    lambda: GPT2LM(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2)),
    lambda: LlamaLM(LlamaDecoderConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                       max_position_embeddings=32)),
])
def test_a_static_mask_in_the_forward_equals_attention_restricted_by_hand(build):
    """With a local window of 1 every token sees only itself: the output at k cannot depend on tokens j < k."""
    torch.manual_seed(0)
    model = build().eval()
    ids = torch.randint(0, 50, (1, 12))
    changed = ids.clone()
    changed[0, :6] = (ids[0, :6] + 1) % 50
    mask = local_window_mask(12, 1)
    with torch.no_grad():
        a, b = model(ids, attn_mask=mask).logits, model(changed, attn_mask=mask).logits
        full_a, full_b = model(ids).logits, model(changed).logits
        assert torch.allclose(a[:, 6:], b[:, 6:], atol=1e-6)  # the window hides the changed tokens
        assert not torch.allclose(full_a[:, 6:], full_b[:, 6:], atol=1e-3)  # the causal model sees them
        # the full causal mask as a static mask is the plain causal forward
        assert torch.allclose(model(ids, attn_mask=local_window_mask(12, 12)).logits, full_a, atol=1e-5)
    with pytest.raises(ValueError, match="bool tensor"):
        model(ids, attn_mask=torch.ones(12, 12))
