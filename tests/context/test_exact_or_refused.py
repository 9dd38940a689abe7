"""attach is exact or refuses, atomic and undoable (bab.context.attach): on random tiny configs of every family the
docs list, the attached model with pruning off computes the untouched model's logits (full and cached) and with
pruning on generates through a PrunedCache as its full forward; families whose attention takes arguments the
"bab_context" attention does not compute are refused with the reason and left exactly as they were; a failure half
way through attaching puts the model back; detach gives back the untouched model; the attention implementation
cannot be changed under an attached model."""

import copy

import pytest
import tiny_decoders
import torch

from bab.context.attach import ATTN_IMPLEMENTATION, attach, detach, is_attached, set_pruning
from bab.context.interaction import PruningConfig
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers
PRUNING = PruningConfig(r=8, init_std=0.5, init_bias=1.0)  # scores spread around 0: tokens drop
SEEDS = (0, 1, 2)
CASES = [(seed, case) for seed in SEEDS for case in tiny_decoders.random_tiny_configs(seed)]


def untouched(seed: int, case: str):
    model_class, config = tiny_decoders.random_tiny_configs(seed)[case]
    torch.manual_seed(seed)
    return tiny_decoders.unit_scale_(model_class(config))


def ids_for(seed: int, batch: int = 2, length: int = 14) -> torch.Tensor:
    return torch.randint(1, 97, (batch, length), generator=torch.Generator().manual_seed(seed + 100))


def snapshot(model) -> dict:
    """Everything attach may touch: parameters and buffers, modules, hooks, config, attention implementation."""
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "modules": [(name, type(m).__name__) for name, m in model.named_modules()],
        "hooks": [(name, len(m._forward_pre_hooks), len(m._forward_hooks)) for name, m in model.named_modules()],
        "config": model.config.to_dict(),
        "attn": model.config._attn_implementation,
        "attributes": [(name, sorted(m.__dict__)) for name, m in model.named_modules()],
    }


def assert_same(model, reference_model, before: dict, ids: torch.Tensor) -> None:
    after = snapshot(model)
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), key
    for part in ("modules", "hooks", "config", "attn", "attributes"):
        assert after[part] == before[part], part
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference_model(ids).logits, atol=0, rtol=0)


# ---------------------------------------------------------------------- exact


@pytest.mark.parametrize(("seed", "case"), CASES)
def test_pruning_off_equals_the_untouched_model_full_and_cached(seed, case):
    plain = untouched(seed, case)
    model = attach(copy.deepcopy(plain), PRUNING).eval()
    set_pruning(model, False)
    ids = ids_for(seed)
    with torch.no_grad():
        expected = plain(ids).logits  # transformers' own attention (SDPA), its own masks and windows
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=1e-5)
        cache = PrunedCache()
        steps = [model(ids[:, :6], past_key_values=cache).logits]
        steps += [model(ids[:, t:t + 1], past_key_values=cache).logits for t in range(6, ids.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("seed", "case"), CASES)
def test_cached_generation_with_pruning_equals_the_full_forward(seed, case):
    model = attach(untouched(seed, case), PRUNING).eval()
    ids = ids_for(seed)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                             past_key_values=PrunedCache(), output_logits=True, return_dict_in_generate=True)
        full = model(out.sequences[:, :-1], use_cache=False).logits  # the whole hard forward of what was generated
    n = ids.shape[1]
    assert torch.equal(out.sequences[:, n:], full[:, n - 1:].argmax(-1))
    torch.testing.assert_close(torch.stack(out.logits, dim=1), full[:, n - 1:], atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        model(ids, use_cache=False)
    from bab.context.attach import context_state
    assert any(torch.isinf(e).any() for e in context_state(model).effective)  # pruning dropped tokens here


@pytest.mark.parametrize("family", sorted(tiny_decoders.more_accepted_decoders()))
def test_other_accepted_families_are_exact_too(family):
    model_class, config = tiny_decoders.more_accepted_decoders()[family]
    torch.manual_seed(0)
    plain = tiny_decoders.unit_scale_(model_class(config))
    model = attach(copy.deepcopy(plain), PRUNING).eval()
    ids = ids_for(0)
    with torch.no_grad():
        set_pruning(model, False)
        torch.testing.assert_close(model(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
        set_pruning(model, True)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                             past_key_values=PrunedCache(), output_logits=True, return_dict_in_generate=True)
        full = model(out.sequences[:, :-1], use_cache=False).logits[:, ids.shape[1] - 1:]
    torch.testing.assert_close(torch.stack(out.logits, dim=1), full, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------- refused


@pytest.mark.parametrize("family", sorted(tiny_decoders.refused_decoders()))
def test_refused_families_name_the_reason_and_stay_untouched(family):
    model, reason = tiny_decoders.refused_decoders()[family]
    model.eval()
    reference_model = copy.deepcopy(model)
    before = snapshot(model)
    with pytest.raises(ValueError, match=reason):
        attach(model, PRUNING)
    assert not is_attached(model)
    assert_same(model, reference_model, before, ids_for(0, length=6))


def test_an_extra_attention_argument_arriving_at_run_time_is_refused():
    model = attach(untouched(0, "llama"), PRUNING)
    with pytest.raises(ValueError, match="sinks"), torch.no_grad():
        model(ids_for(0), s_aux=torch.zeros(4))  # reaches the attention through the layers' **kwargs


# ---------------------------------------------------------------------- atomic and undoable


@pytest.mark.parametrize(("seed", "case"), [(0, case) for case in tiny_decoders.random_tiny_configs(0)])
def test_detach_gives_back_the_untouched_model(seed, case):
    model = untouched(seed, case)
    reference_model = copy.deepcopy(model)
    before = snapshot(model)
    ids = ids_for(seed)
    attach(model, PRUNING)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=3, do_sample=False, past_key_values=PrunedCache())
    copied = copy.deepcopy(model)  # a copy detaches on its own, leaving the original attached
    assert detach(model) is model and not is_attached(model)
    assert_same(model, reference_model, before, ids)
    assert is_attached(copied)
    with torch.no_grad():
        copied(ids)
    detach(copied)
    assert_same(copied, reference_model, before, ids)
    model.set_attn_implementation("eager")  # the model's own again: no guard left
    assert model.config._attn_implementation == "eager"
    attach(model, PRUNING)  # and it can be attached again


@pytest.mark.parametrize("where", ["set_attn_implementation refuses", "set_attn_implementation ignores",
                                   "saving the config key"])
def test_a_failure_half_way_through_attach_puts_the_model_back(where, monkeypatch):
    model = untouched(0, "llama")
    reference_model = copy.deepcopy(model)
    before = snapshot(model)
    model_class = type(model)
    if where == "set_attn_implementation refuses":
        def fail(self, *args, **kwargs):
            raise RuntimeError("refused here")
        monkeypatch.setattr(model_class, "set_attn_implementation", fail)
    elif where == "set_attn_implementation ignores":  # as GPT-J did: a warning and no change
        monkeypatch.setattr(model_class, "set_attn_implementation", lambda self, *args, **kwargs: None)
    else:
        real = type(model.config).__setattr__

        def fail_on_key(self, name, value):
            if name == "bab_context_pruning":
                raise RuntimeError("refused here")
            real(self, name, value)
        monkeypatch.setattr(type(model.config), "__setattr__", fail_on_key)
    with pytest.raises(RuntimeError, match="refused"):
        attach(model, PRUNING)
    monkeypatch.undo()
    assert not is_attached(model)
    assert_same(model, reference_model, before, ids_for(0))


def test_bad_settings_are_refused_before_the_model_changes():
    model = untouched(0, "gpt2")
    before = snapshot(model)
    for pruning, settings, error in ((PRUNING, dict(alpha=0.5), "alpha"), (PRUNING, dict(budget=0.5), "budget"),
                                     (PruningConfig(budget_conditioned=True), dict(budget=1.5), "budget"),
                                     (dict(r=8), {}, "PruningConfig")):
        with pytest.raises((ValueError, TypeError), match=error):
            attach(model, pruning, **settings)
        assert snapshot(model)["attributes"] == before["attributes"] and not is_attached(model)
    attach(model, PRUNING)
    with pytest.raises(ValueError, match="already attached"):
        attach(model, PRUNING)


def test_the_attention_implementation_cannot_change_under_an_attached_model():
    model = attach(untouched(0, "mistral-window"), PRUNING)
    ids = ids_for(0)
    with pytest.raises(ValueError, match="detach"):
        model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match="detach"):
        model.model.set_attn_implementation("sdpa")  # the inner PreTrainedModel too
    model.set_attn_implementation(ATTN_IMPLEMENTATION)  # already so: nothing to refuse
    model.config._attn_implementation = "sdpa"  # around the method: the next forward refuses
    with pytest.raises(ValueError, match="changed to 'sdpa'"), torch.no_grad():
        model.generate(ids, max_new_tokens=2, do_sample=False, past_key_values=PrunedCache())
