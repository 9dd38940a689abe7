"""Context pruning on decoders with sliding-window attention (Mistral, Qwen2 with its window on): the window
transformers builds into the mask holds with pruning off and on, in the full forward and in cached generation."""

import copy

import pytest
import torch
from tiny_decoders import architectures, quiet_transformers, unit_scale_  # noqa: F401 (a fixture)

from bab.context.attach import attach, set_pruning
from bab.context.interaction import PruningConfig
from bab.context.pruned_cache import PrunedCache

WINDOW = 4
WINDOWED = {"mistral": dict(sliding_window=WINDOW),
            "qwen2": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0)}


def windowed(family: str):
    model_class, config = architectures(32)[family]
    torch.manual_seed(0)
    return unit_scale_(model_class(config(attn_implementation="sdpa", **WINDOWED[family])))


def without_window(family: str, model):
    """The same weights in a model of the family built without a window, eager attention."""
    model_class, config = architectures(32)[family]
    eager = model_class(config(attn_implementation="eager")).eval()
    eager.load_state_dict(model.state_dict())
    return eager


def window_loop_logits(family: str, model, ids: torch.Tensor) -> torch.Tensor:
    """The plain model's logits with the window written out here: each query attends to itself and the
    ``WINDOW - 1`` tokens before it, given as an explicit 4-D additive mask to the model built without a window."""
    eager = without_window(family, model)
    T = ids.shape[1]
    q, k = torch.arange(T).view(-1, 1), torch.arange(T).view(1, -1)
    allowed = (k <= q) & (q - k < WINDOW)
    mask = torch.zeros(1, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return eager(ids, attention_mask=mask, use_cache=False).logits


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_the_window_holds_with_pruning_off(family):
    plain = windowed(family)
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = window_loop_logits(family, plain, ids)
        # the reference differs from attending to everything: the window matters at this length
        assert not torch.allclose(reference, unwindowed_logits(family, plain, ids), atol=1e-3)
        model = attach(copy.deepcopy(plain), PruningConfig(r=4)).eval()
        set_pruning(model, False)
        torch.testing.assert_close(model(ids).logits, reference, atol=1e-4, rtol=1e-4)
        cache = PrunedCache()
        model(ids[:, :8], past_key_values=cache)
        for t in range(8, 12):  # one token at a time through the cache
            step = model(ids[:, t:t + 1], past_key_values=cache).logits[:, -1]
            torch.testing.assert_close(step, reference[:, t], atol=1e-4, rtol=1e-4)


def unwindowed_logits(family: str, model, ids: torch.Tensor) -> torch.Tensor:
    """The same weights attending causally to every earlier token (no window)."""
    return without_window(family, model)(ids, use_cache=False).logits


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_cached_generation_with_pruning_equals_the_full_forward_inside_the_window(family):
    model = attach(windowed(family), PruningConfig(r=4)).eval()
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, past_key_values=PrunedCache())
        seq = ids
        for _ in range(8):  # greedy, every step recomputed from the whole sequence without a cache
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
