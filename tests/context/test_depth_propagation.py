"""Depth propagation (the official code's propagate_in_depth): layer l attends with its own log I plus the
effective log I of the layer below, so a token dropped in one layer stays dropped in every layer above. It lives in
attach.py's attention function (full forward) and in PrunedCache (cached generation); tested on transformers' GPT-2
and Llama against references written out here: the sum of the masks of a run without propagation, an eager
attention that attends with those sums, and the full forward of the generated sequence."""

import math

import pytest
import tiny_decoders
import torch
from transformers import AttentionInterface, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from bab.context.attach import attach, context_state
from bab.context.interaction import PruningConfig
from bab.context.lm import lm_forward
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers
KINDS = ["gpt2", "llama"]


def plain_model(kind, n_layer=2):
    torch.manual_seed(0)  # same seed: the same decoder weights with and without propagation (attach draws after)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=60, n_positions=64, n_embd=32, n_layer=n_layer, n_head=4,
                                          **tiny_decoders.NO_SPECIAL)).eval()
    return LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=48,
                                        num_hidden_layers=n_layer, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=8, max_position_embeddings=64, initializer_range=0.2,
                                        **tiny_decoders.NO_SPECIAL)).eval()


def build(kind, propagate, n_layer=2):
    pruning = PruningConfig(r=8, init_std=0.5, init_bias=1.0, propagate_in_depth=propagate)
    return attach(plain_model(kind, n_layer), pruning)


def log_keeps(model, ids):
    """(own, effective): each layer's log I [B, T, T] of a hard full forward."""
    with torch.no_grad():
        out = lm_forward(model, ids, return_log_keep=True)
    return [o.detach() for o in context_state(model).own], out.log_keep


@pytest.mark.parametrize("kind", KINDS)
def test_second_layer_mask_is_its_own_plus_the_first(kind):
    """Layer 0 sees the same input either way, so layer 1's own decisions are the same; with propagation its
    effective mask must be the sum of both layers' masks without it (computed here from the plain run)."""
    ids = torch.randint(0, 60, (2, 40), generator=torch.Generator().manual_seed(1))
    plain_own, plain = log_keeps(build(kind, propagate=False), ids)
    deep_own, deep = log_keeps(build(kind, propagate=True), ids)
    assert all(torch.equal(p, o) for p, o in zip(plain, plain_own, strict=True))  # no propagation: effective = own
    assert torch.equal(deep_own[0], plain[0]) and torch.equal(deep_own[1], plain[1])
    assert torch.equal(deep[0], plain[0])
    assert torch.equal(deep[1], plain[0] + plain[1])
    # not vacuous: some token that layer 1 alone keeps was dropped by layer 0, so propagation changes layer 1
    assert ((plain[1] == 0) & (plain[0] == -math.inf)).any()


REFERENCE_KEEP = {}  # layer -> bool [B, T, T]: what the written-out attention lets each query see


def eager_masked_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """softmax(q k^T * scaling) v over the pairs REFERENCE_KEEP[layer] allows (AND causal); key/value heads repeated
    for grouped-query attention. query [B, H, T, Dh], key/value [B, G, T, Dh] -> [B, T, H, Dh]."""
    T = query.shape[2]
    keep = REFERENCE_KEEP[module.layer_idx] & torch.ones(T, T, dtype=torch.bool).tril()
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = (query @ key.transpose(-1, -2)) * scaling
    weights = scores.masked_fill(~keep[:, None], -math.inf).softmax(dim=-1)
    return (weights @ value).transpose(1, 2), None


@pytest.mark.parametrize("kind", KINDS)
def test_the_attention_attends_with_the_sum_of_the_masks_so_far(kind):
    """Three layers: the propagated model's logits equal the plain decoder's (same weights) run through an eager
    attention that lets layer l see exactly what the sum of the own masks of layers 0..l keeps."""
    ids = torch.randint(0, 60, (2, 24), generator=torch.Generator().manual_seed(4))
    deep_model = build(kind, propagate=True, n_layer=3)
    with torch.no_grad():
        logits = lm_forward(deep_model, ids).logits
    own = [o.detach() for o in context_state(deep_model).own]
    plain_own, _ = log_keeps(build(kind, propagate=False, n_layer=3), ids)
    assert torch.equal(own[0], plain_own[0]) and torch.equal(own[1], plain_own[1])  # same inputs up to layer 1
    total = torch.zeros_like(own[0])
    for layer, o in enumerate(own):
        total = total + o
        REFERENCE_KEEP[layer] = total > -math.inf
    assert not torch.equal(REFERENCE_KEEP[2], own[2] > -math.inf)  # the sum differs from layer 2's own mask
    AttentionInterface.register("bab_test_eager_masked", eager_masked_attention)
    reference = plain_model(kind, n_layer=3)
    reference.set_attn_implementation("bab_test_eager_masked")
    try:
        with torch.no_grad():
            expected = reference(ids, use_cache=False).logits
    finally:
        REFERENCE_KEEP.clear()
    assert (logits - expected).abs().max() < 1e-5
    # and the masks matter: without them the logits differ
    with torch.no_grad():
        dense = plain_model(kind, n_layer=3)(ids, use_cache=False).logits
    assert (logits - dense).abs().max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_what_a_layer_keeps_is_nested_in_what_the_layer_below_keeps(kind):
    ids = torch.randint(0, 60, (2, 40), generator=torch.Generator().manual_seed(2))
    _, log_keep = log_keeps(build(kind, propagate=True, n_layer=4), ids)
    for below, above in zip(log_keep, log_keep[1:], strict=False):
        assert not ((above > -math.inf) & (below == -math.inf)).any()


@pytest.mark.parametrize("kind", KINDS)
def test_cached_generation_with_propagation_equals_the_full_forward(kind):
    model = build(kind, propagate=True, n_layer=3)
    prompt = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(3))
    cache = PrunedCache()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), past_key_values=cache,
                             max_new_tokens=17, min_new_tokens=17, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        seq = out.sequences
        full = lm_forward(model, seq[:, :-1]).logits[:, prompt.shape[1] - 1:]  # what predicted each new token
    stepped = torch.stack(out.logits, dim=1)
    assert stepped.shape == full.shape == (2, 17, 60)
    assert (stepped - full).abs().max() < 1e-5
    # not vacuous: in this sequence propagation drops pairs the layers' own masks keep
    state = context_state(model)
    assert any(((o == 0) & (e == -math.inf)).any() for o, e in zip(state.own[1:], state.effective[1:], strict=True))
    # each layer's cache holds a subset of the positions the layer below holds, for every row
    for row in range(2):
        held = [set(layer.positions[row][layer.valid[row]].tolist()) for layer in cache.layers]
        assert all(above <= below for below, above in zip(held, held[1:], strict=False))
        assert len(held[-1]) < seq.shape[1] - 1  # tokens were dropped for good
