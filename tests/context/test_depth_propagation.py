"""Depth propagation (the official code's propagate_in_depth): layer l attends with its own log I plus the
effective log I of the layer below, so a token dropped in one layer stays dropped in every layer above."""

import math

import pytest
import torch

from bab.context.gpt2 import GPT2LM, GPT2Config
from bab.context.interaction import PruningConfig
from bab.context.llama import LlamaDecoderConfig, LlamaLM


def build(kind, propagate, n_layer=2):
    torch.manual_seed(0)  # same seed: the same weights with and without propagation
    pruning = PruningConfig(r=8, init_std=0.5, init_bias=1.0, propagate_in_depth=propagate)
    if kind == "gpt2":
        config = GPT2Config(vocab_size=60, n_positions=64, n_embd=32, n_layer=n_layer, n_head=4, pruning=pruning)
        return GPT2LM(config).eval()
    config = LlamaDecoderConfig(vocab_size=60, hidden_size=32, intermediate_size=48, num_hidden_layers=n_layer,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                                initializer_range=0.2, pruning=pruning)
    return LlamaLM(config).eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_second_layer_mask_is_its_own_plus_the_first(kind):
    """Layer 0 sees the same input either way, so layer 1's own decisions are the same; with propagation its
    effective mask must be the sum of both layers' masks without it (computed here from the plain run)."""
    ids = torch.randint(0, 60, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = build(kind, propagate=False)(ids, return_log_keep=True).log_keep
        deep = build(kind, propagate=True)(ids, return_log_keep=True).log_keep
    assert torch.equal(deep[0], plain[0])
    assert torch.equal(deep[1], plain[0] + plain[1])
    # not vacuous: some token that layer 1 alone keeps was dropped by layer 0, so propagation changes layer 1
    assert ((plain[1] == 0) & (plain[0] == -math.inf)).any()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_what_a_layer_keeps_is_nested_in_what_the_layer_below_keeps(kind):
    ids = torch.randint(0, 60, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        log_keep = build(kind, propagate=True, n_layer=4)(ids, return_log_keep=True).log_keep
    for below, above in zip(log_keep, log_keep[1:], strict=False):
        assert not ((above > -math.inf) & (below == -math.inf)).any()


def test_cached_gpt2_generation_with_propagation_equals_the_full_forward():
    model = build("gpt2", propagate=True, n_layer=3)
    prompt = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(2, 28, prune=True)
    logits, seq = [model.prefill(prompt, cache)], prompt
    for _ in range(16):
        nxt = logits[-1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        logits.append(model.decode_step(nxt, cache))
    with torch.no_grad():
        full = model(seq).logits[:, prompt.shape[1] - 1:]
    assert (torch.stack(logits, dim=1) - full).abs().max() < 1e-5
    # each layer's cache holds a subset of the positions the layer below holds
    held = [set(layer.positions[0][layer.valid[0, :layer.positions.shape[1]]].tolist()) for layer in cache.layers]
    assert all(above <= below for below, above in zip(held, held[1:], strict=False))
