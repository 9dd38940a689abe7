"""A PrunedCache never holds more than transformers' own cache when nothing is pruned (bab.context.pruned_cache):
tokens a sliding window has passed leave it as they leave transformers' sliding-window cache layers, and with
nothing dropped it keeps no per-slot positions and at most 1/SLACK spare slots. Bytes are counted as the generation
bench counts them (bab.context.bench.cache_bytes: every tensor a cache layer holds)."""

import copy

import pytest
import tiny_decoders
import torch
from transformers import DynamicCache

from bab.context.attach import attach, set_pruning
from bab.context.bench import cache_bytes
from bab.context.interaction import PruningConfig
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers
WINDOW = 8
FAMILIES = tiny_decoders.architectures(n_positions=256)
CASES = {
    "mistral-window": ("mistral", dict(sliding_window=WINDOW)),
    "qwen2-window": ("qwen2", dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0)),
    "qwen2-window-above-full": ("qwen2", dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
    "llama": ("llama", {}),
    "gpt2": ("gpt2", {}),
}
NOTHING_DROPPED = PruningConfig(r=8, init_bias=1e4)  # every score far above 0: pruning on, nothing dropped
PROMPT, NEW = 150, 51  # 200 tokens seen


def plain_model(case: str):
    family, overrides = CASES[case]
    model_class, config = FAMILIES[family]
    torch.manual_seed(0)
    return tiny_decoders.unit_scale_(model_class(config(**overrides)))


def generate(model, cache):
    ids = torch.randint(1, 97, (2, PROMPT), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              past_key_values=cache, pad_token_id=0).cpu()


def key_value_heads(model) -> tuple[int, int]:
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return heads, config.hidden_size // config.num_attention_heads


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("pruning_on", [False, True], ids=["pruning-off", "pruning-on-nothing-dropped"])
def test_with_nothing_pruned_the_cache_holds_what_transformers_cache_holds(case, pruning_on):
    plain = plain_model(case)
    theirs = DynamicCache(config=plain.config)  # transformers' own: sliding layers keep window - 1 tokens
    expected = generate(plain, theirs)
    model = attach(copy.deepcopy(plain), NOTHING_DROPPED)
    set_pruning(model, pruning_on)
    ours = PrunedCache()
    assert torch.equal(generate(model, ours), expected)
    seen = PROMPT + NEW - 1
    for layer, their_layer in zip(ours.layers, theirs.layers, strict=True):
        held = layer.positions[:, :layer.used][layer.valid[:, :layer.used]].view(2, -1)
        # the same tokens as transformers' layer, in order: its keys and values are ours, slot for slot
        n = their_layer.keys.shape[2]
        assert torch.equal(held, torch.arange(seen - n, seen).expand(2, -1))
        # (equal to rounding: the layers below attended through another kernel)
        torch.testing.assert_close(layer.keys[:, :, layer.dead:layer.used], their_layer.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer.values[:, :, layer.dead:layer.used], their_layer.values, atol=1e-5,
                                   rtol=1e-5)
        assert layer.in_order  # nothing dropped: no per-slot positions kept
    heads, head_dim = key_value_heads(model)
    interaction_share = NOTHING_DROPPED.r / (2 * heads * head_dim) if pruning_on else 0.0  # int keys beside k, v
    assert cache_bytes(ours) <= 1.05 * (1 + interaction_share) * cache_bytes(theirs)
    key_value_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in ours.layers)
    assert key_value_bytes <= 1.05 * cache_bytes(theirs)
    if "window" in case:  # not vacuous: the window layers hold a small part of the 200 tokens
        every_token = 2 * seen * 2 * heads * head_dim * 4 * len(ours.layers)
        assert cache_bytes(theirs) < (0.55 if "above-full" in case else 0.05) * every_token


@pytest.mark.parametrize("case", ["mistral-window", "qwen2-window-above-full"])
def test_with_tokens_dropped_a_window_layer_holds_at_most_its_window(case):
    model = attach(plain_model(case), PruningConfig(r=8, init_std=0.5, init_bias=1.0))
    cache = PrunedCache()
    generated = generate(model, cache)
    with torch.no_grad():  # the full forward of what was generated, greedy: the tokens the cache path chose
        full = model(generated[:, :-1], use_cache=False).logits[:, PROMPT - 1:].argmax(-1)
    assert torch.equal(generated[:, PROMPT:], full)
    for layer_idx, layer in enumerate(cache.layers):
        live = layer.live_tokens()
        windowed = layer.window is not None
        assert windowed == (case == "mistral-window" or layer_idx >= 1)
        if windowed:
            assert (live <= WINDOW - 1).all()
            held = layer.positions[layer.valid]
            assert (held > PROMPT + NEW - 1 - WINDOW).all()  # only what the next query could still see


def test_depth_propagation_keeps_what_a_window_passed_and_generates_as_the_full_forward():
    """With depth propagation a layer's drops reach the layer above, which may see further back than the window:
    the cache then keeps the tokens the window passed (correct, only larger)."""
    model = attach(plain_model("qwen2-window-above-full"),
                   PruningConfig(r=8, init_std=0.5, init_bias=1.0, propagate_in_depth=True))
    cache = PrunedCache()
    generated = generate(model, cache)
    with torch.no_grad():
        full = model(generated[:, :-1], use_cache=False).logits[:, PROMPT - 1:].argmax(-1)
    assert torch.equal(generated[:, PROMPT:], full)
    assert all(layer.window is None for layer in cache.layers)
