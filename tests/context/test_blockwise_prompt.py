"""A long call through a PrunedCache (the prompt, or a second multi-token turn) is attended a block of queries at a
time (``PrunedLayer.PREFILL_CHUNK``), each block over the slots up to its last query: whatever the block size, the
logits equal the full hard forward of the same tokens, with left padding, after earlier drops (slots out of order)
and with sliding windows. The mask of a block is checked against the visibility rule written out as a loop."""

import pytest
import tiny_decoders
import torch

from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.context.pruned_cache import PrunedCache, PrunedLayer, Visibility

quiet_transformers = tiny_decoders.quiet_transformers
PRUNING = PruningConfig(r=8, init_std=0.5, init_bias=1.0)  # scores spread around 0: tokens drop
CASES = ["gpt2", "llama", "mistral-window", "qwen2-window"]


def attached(case: str, seed: int = 0):
    model_class, config = tiny_decoders.random_tiny_configs(seed)[case]
    torch.manual_seed(seed)
    return attach(tiny_decoders.unit_scale_(model_class(config)), PRUNING).eval()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("block", [1, 3, 256])
def test_two_long_calls_in_blocks_equal_the_full_forward(case, block, monkeypatch):
    monkeypatch.setattr(PrunedLayer, "PREFILL_CHUNK", block)
    model = attached(case)
    ids = torch.randint(1, 97, (3, 20), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=False).logits
        cache = PrunedCache()
        first = model(ids[:, :9], attention_mask=mask[:, :9], past_key_values=cache).logits
        # the second call's cached slots are out of order once the first call dropped tokens
        assert any(not layer.in_order for layer in cache.layers)
        second = model(ids[:, 9:], attention_mask=mask, past_key_values=cache).logits
    real = mask.bool()
    torch.testing.assert_close(torch.cat([first, second], dim=1)[real], full[real], atol=1e-4, rtol=1e-4)


def test_a_block_mask_follows_the_visibility_rule_written_out():
    """Query n sees slot j iff j is live, holds a position <= n and no query up to n dropped it."""
    generator = torch.Generator().manual_seed(3)
    B, cached, new, seen = 2, 5, 4, 7
    K = cached + new
    positions = torch.cat([torch.tensor([[0, 2, 3, -1, 6], [1, -1, 4, 5, 6]]),
                           torch.arange(seen, seen + new).expand(B, -1)], dim=1)
    valid = positions >= 0
    first = torch.randint(seen, seen + new + 1, (B, K), generator=generator)
    visibility = Visibility(positions, valid, first, seen, new, in_order=False)
    for start, stop in [(0, 4), (1, 3), (3, 4)]:
        mask = visibility.mask(start, stop)
        assert mask.shape == (B, stop - start, cached + stop)
        for b in range(B):
            for i, n in enumerate(range(seen + start, seen + stop)):
                for j in range(cached + stop):
                    expected = bool(valid[b, j]) and positions[b, j] <= n < first[b, j]
                    assert bool(mask[b, i, j]) == expected, (b, n, j)
