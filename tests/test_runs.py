import json

import pytest
import torch

from bab.core.runs import RunCache, config_key


def tiny_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def test_round_trip_returns_the_trained_weights(tmp_path):
    cache = RunCache(tmp_path)
    config = {"lr": 0.1, "seed": 1, "nested": {"a": [1, 2]}}
    trained = tiny_model(1)
    calls = []

    def fit(model):
        calls.append(1)
        model.load_state_dict(trained.state_dict())
        return {"accuracy": 99.0}

    first = tiny_model(0)
    metrics = cache.get_or_train("dense", config, first, fit)
    assert metrics == {"accuracy": 99.0, "cached": False}
    second = tiny_model(2)
    metrics = cache.get_or_train("dense", config, second, fit)
    assert metrics == {"accuracy": 99.0, "cached": True}
    assert len(calls) == 1
    torch.testing.assert_close(second.weight, trained.weight)


def test_never_returns_a_checkpoint_for_a_different_config(tmp_path):
    cache = RunCache(tmp_path)
    cache.save("dense", {"lr": 0.1}, tiny_model(1), {"accuracy": 1.0})
    assert cache.load("dense", {"lr": 0.2}, tiny_model(0)) is None
    assert cache.load("dense", {"lr": 0.1, "extra": None}, tiny_model(0)) is None
    assert cache.load("other-name", {"lr": 0.1}, tiny_model(0)) is None
    assert cache.load("dense", {"lr": 0.1}, tiny_model(0)) == {"accuracy": 1.0}


def test_a_forged_folder_with_the_right_key_but_wrong_config_is_ignored(tmp_path):
    cache = RunCache(tmp_path)
    folder = cache.save("dense", {"lr": 0.1}, tiny_model(1), {"accuracy": 1.0})
    # simulate a hash collision: the folder for config A holds the run of config B
    (folder / "config.json").write_text(json.dumps({"lr": 0.3}))
    assert cache.load("dense", {"lr": 0.1}, tiny_model(0)) is None


def test_key_is_order_independent_and_sensitive_to_values():
    assert config_key({"a": 1, "b": 2}) == config_key({"b": 2, "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 1.5})
    assert config_key({"a": {"b": 1}}) != config_key({"a": {"b": 2}})


def test_failed_training_leaves_no_partial_run(tmp_path):
    cache = RunCache(tmp_path)

    def boom(model):
        raise RuntimeError("diverged")

    with pytest.raises(RuntimeError):
        cache.get_or_train("dense", {"lr": 1}, tiny_model(0), boom)
    assert list(tmp_path.iterdir()) == []


def test_save_is_atomic_even_if_writing_fails(tmp_path, monkeypatch):
    cache = RunCache(tmp_path)
    cache.save("dense", {"lr": 1}, tiny_model(1), {"accuracy": 1.0})
    import bab.core.runs

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(bab.core.runs, "save_file", broken_save)
    with pytest.raises(OSError):
        cache.save("dense", {"lr": 1}, tiny_model(2), {"accuracy": 2.0})
    # the earlier complete run is still there and no temporary folder is left
    assert cache.load("dense", {"lr": 1}, tiny_model(0)) == {"accuracy": 1.0}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("bad", [{"f": float("nan")}, {"obj": object()}])
def test_unserialisable_config_raises_clear_error(tmp_path, bad):
    with pytest.raises(ValueError, match="JSON-serialisable"):
        RunCache(tmp_path).path("dense", bad)


def test_bad_run_names_raise(tmp_path):
    with pytest.raises(ValueError, match="plain file name"):
        RunCache(tmp_path).path("../escape", {})
