import json
from pathlib import Path

import pytest
import torch

from bab.core.blas import blas_key
from bab.core.provenance import git_commit
from bab.core.runs import CacheMiss, LoadOnlyRunCache, RunCache, config_key


def tiny_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def test_round_trip_returns_the_trained_weights(tmp_path):
    cache = RunCache(tmp_path)
    config = {"lr": 0.1, "seed": 1, "nested": {"a": [1, 2]}}
    trained = tiny_model(1)
    calls = []

    def fit(model, checkpoint):
        calls.append(1)
        model.load_state_dict(trained.state_dict())
        return {"accuracy": 99.0}

    first = tiny_model(0)
    metrics = cache.get_or_train("dense", config, first, fit)
    trained_by = metrics.pop("trained_by")  # which code trained it, when, how long: stored with the model
    assert metrics == {"accuracy": 99.0, "cached": False}
    assert set(trained_by) == {"commit", "started_at", "wall_seconds"} and trained_by["wall_seconds"] >= 0
    assert trained_by["commit"] == git_commit() and trained_by["started_at"].startswith("20")
    second = tiny_model(2)
    metrics = cache.get_or_train("dense", config, second, fit)
    assert metrics == {"accuracy": 99.0, "cached": True, "trained_by": trained_by}  # a hit says who trained it
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



def test_a_load_only_cache_loads_a_hit_and_raises_on_a_miss_without_training(tmp_path):
    trained = tiny_model(1)
    RunCache(tmp_path).save("dense", {"lr": 0.1}, trained, {"accuracy": 1.0})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    cache, calls = LoadOnlyRunCache(tmp_path), []

    def fit(model, checkpoint):
        calls.append(1)
        return {}

    model = tiny_model(0)
    assert cache.get_or_train("dense", {"lr": 0.1}, model, fit) == {"accuracy": 1.0, "cached": True}
    torch.testing.assert_close(model.weight, trained.weight)
    with pytest.raises(CacheMiss, match=r"no run dense-\w+ in the run cache .*\$BAB_CACHE_DIR"):
        cache.get_or_train("dense", {"lr": 0.2}, tiny_model(0), fit)
    assert calls == [] and sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing trained, nothing written

def test_key_is_order_independent_and_sensitive_to_values():
    assert config_key({"a": 1, "b": 2}) == config_key({"b": 2, "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 1.5})
    assert config_key({"a": {"b": 1}}) != config_key({"a": {"b": 2}})


def test_failed_training_leaves_no_partial_run(tmp_path):
    cache = RunCache(tmp_path)

    def boom(model, checkpoint):
        raise RuntimeError("diverged")

    with pytest.raises(RuntimeError):
        cache.get_or_train("dense", {"lr": 1}, tiny_model(0), boom)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == []  # no run, no checkpoint, and the training lock's file removed as it was let go


def test_save_is_atomic_even_if_writing_fails(tmp_path, monkeypatch):
    cache = RunCache(tmp_path)
    cache.save("dense", {"lr": 1}, tiny_model(1), {"accuracy": 1.0})
    import bab.core.runs

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(bab.core.runs, "save_model", broken_save)
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


def counting_fit(calls):
    def fit(model, checkpoint):
        calls.append(1)
        with torch.no_grad():
            model.weight.add_(1.0)
        return {"accuracy": 1.0}
    return fit


def test_train_cached_keys_on_the_code_version(tmp_path):
    from bab.core.runs import train_cached

    cache, calls = RunCache(tmp_path), []
    lineage = {"train": {"lr": 0.1}}
    model, metrics, stored = train_cached(cache, "dense", lineage, lambda: tiny_model(0), counting_fit(calls),
                                          seed=3, method="heads", version=1)
    assert metrics["cached"] is False and not model.training
    threads = torch.get_num_threads()
    assert stored == {"train": {"lr": 0.1}, "code": {"method": "heads", "version": 1, "threads": threads,
                                                     **blas_key()}}
    assert "code" not in lineage
    again, metrics, _ = train_cached(cache, "dense", lineage, lambda: tiny_model(0), counting_fit(calls),
                                     seed=3, method="heads", version=1)
    assert metrics["cached"] is True and len(calls) == 1
    torch.testing.assert_close(again.weight, model.weight)
    _, metrics, _ = train_cached(cache, "dense", lineage, lambda: tiny_model(0), counting_fit(calls),
                                 seed=3, method="heads", version=2)
    assert metrics["cached"] is False and len(calls) == 2  # a bumped version never gets the old checkpoint


def test_train_cached_keys_on_the_thread_count(tmp_path):
    from bab.core.runs import train_cached

    cache, calls, saved = RunCache(tmp_path), [], torch.get_num_threads()
    try:
        for threads, expect_cached in ((1, False), (2, False), (1, True)):
            torch.set_num_threads(threads)
            _, metrics, stored = train_cached(cache, "dense", {}, lambda: tiny_model(0), counting_fit(calls),
                                              seed=3, method="heads", version=1)
            assert metrics["cached"] is expect_cached and stored["code"]["threads"] == threads
    finally:
        torch.set_num_threads(saved)
    assert len(calls) == 2  # one training per thread count: 1 and 2 threads sum in different orders


def test_train_cached_seeds_before_building_the_model(tmp_path):
    from bab.core.runs import train_cached

    def build():
        return torch.nn.Linear(3, 2)  # initialised from the global RNG

    first, _, _ = train_cached(RunCache(enabled=False), "a", {}, build, lambda m, _: {}, seed=5, method="x", version=1)
    torch.manual_seed(123)
    second, _, _ = train_cached(RunCache(enabled=False), "a", {}, build, lambda m, _: {}, seed=5, method="x", version=1)
    torch.testing.assert_close(first.weight, second.weight)
    with pytest.raises(TypeError, match="TRAINING_VERSION"):
        train_cached(RunCache(tmp_path), "a", {}, build, lambda m, _: {}, seed=5, method="x", version="1")


def test_bumping_a_methods_training_version_retrains_the_studys_runs(tmp_path, monkeypatch):
    import bab.heads
    from bab.data.synthetic import SyntheticConfig
    from bab.experiments.synthetic import SyntheticExperiment, SyntheticProfile
    from bab.heads.train import TrainConfig

    step = TrainConfig(objective="dense", epochs=1, batch_size=16)
    profile = SyntheticProfile(name="tiny", data=SyntheticConfig(seq_len=8, num_train=32, num_val=16),
                               model=dict(d_model=16, num_heads=2, num_layers=1, d_ff=16), dense=step,
                               scratch=step, warm=step, static=step, hard_adapt=step)
    study = SyntheticExperiment(profile, cache=RunCache(tmp_path), progress=False)
    _, first, lineage = study.dense()
    _, same, _ = study.dense()
    assert (first["cached"], same["cached"]) == (False, True)
    assert lineage["code"] == {"method": "heads", "version": bab.heads.TRAINING_VERSION,
                               "threads": torch.get_num_threads(), **blas_key()}
    monkeypatch.setattr(bab.heads, "TRAINING_VERSION", bab.heads.TRAINING_VERSION + 1)
    _, bumped, lineage = study.dense()
    assert bumped["cached"] is False and lineage["code"]["version"] == bab.heads.TRAINING_VERSION


def test_the_vit_studys_runs_are_keyed_on_sparsifiners_training_version(tmp_path, monkeypatch):
    """Version 2 fixed the predictor's down-projection (it summed W_down over heads): no checkpoint trained
    before is served."""
    import bab.sparsifiner
    from bab.experiments.vit import ViTProfile, ViTStudy
    from bab.heads.train import TrainConfig
    from bab.sparsifiner.predictor import ConnectivityConfig
    from bab.sparsifiner.train import ViTTrainConfig

    assert bab.sparsifiner.TRAINING_VERSION >= 2
    step = ViTTrainConfig(objective="dense", epochs=1, batch_size=16)
    model = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16)
    profile = ViTProfile(name="tiny", num_train=16, num_val=8, num_test=8, model=model, dense=step,
                         phase1=ViTTrainConfig(objective="predictor", epochs=1, batch_size=16), phase2=step,
                         heads=TrainConfig(objective="budgeted"), connectivity=ConnectivityConfig(n_down=2))
    study = ViTStudy(profile, cache=RunCache(tmp_path), progress=False)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 1, 8, 8, generator=g),
                                          torch.randint(0, 10, (16,), generator=g))
    monkeypatch.setattr(study, "splits", lambda: {"train": data})
    _, first, lineage = study.predictor()
    _, same, _ = study.predictor()
    assert (first["cached"], same["cached"]) == (False, True)
    assert lineage["code"] == {"method": "sparsifiner", "version": bab.sparsifiner.TRAINING_VERSION,
                               "threads": torch.get_num_threads(), **blas_key()}
    assert lineage["parent"]["code"] == lineage["code"]  # the dense teacher it starts from is keyed on it too
    monkeypatch.setattr(bab.sparsifiner, "TRAINING_VERSION", bab.sparsifiner.TRAINING_VERSION + 1)
    _, bumped, lineage = study.predictor()
    assert bumped["cached"] is False and lineage["code"]["version"] == bab.sparsifiner.TRAINING_VERSION


def test_the_default_cache_is_never_inside_an_installed_package(tmp_path, monkeypatch):
    from bab.core.runs import default_cache_root

    monkeypatch.delenv("BAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    checkout = tmp_path / "checkout"
    (checkout / "bab").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'bab'\n")
    assert default_cache_root(checkout / "bab") == checkout / ".bab_cache" / "runs"
    installed = tmp_path / "site-packages" / "bab"
    installed.mkdir(parents=True)
    assert default_cache_root(installed) == tmp_path / "xdg" / "bab" / "runs"
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_root(installed) == tmp_path / "mine"
    monkeypatch.delenv("BAB_CACHE_DIR")
    repository = Path(__file__).resolve().parents[2]
    assert default_cache_root() == repository / ".bab_cache" / "runs"  # this checkout


def test_a_ledger_keeps_which_models_it_trained_and_which_came_from_the_cache(tmp_path):
    from bab.core.ledger import RunLedger

    ledger = RunLedger()
    cache = RunCache(tmp_path)
    cache.save("older", {"lr": 0.2}, tiny_model(1), {"train_seconds": 5.0})  # stored before commits were recorded

    def fit(model, checkpoint):
        return {"train_seconds": 2.0}

    cache.get_or_train("dense", {"lr": 0.1}, tiny_model(0), fit, ledger)
    cache.get_or_train("dense", {"lr": 0.1}, tiny_model(0), fit, ledger)  # loaded again: it was still trained here
    cache.get_or_train("older", {"lr": 0.2}, tiny_model(0), fit, ledger)
    used = ledger.models_used()
    assert [m["run"] for m in used] == [f"dense-{config_key({'lr': 0.1})}", f"older-{config_key({'lr': 0.2})}"]
    assert [m["cached"] for m in used] == [False, True]
    assert used[0]["commit"] == git_commit() and used[1]["commit"] is None
    assert [m["train_seconds"] for m in used] == [2.0, 5.0]
    used[0]["run"] = "changed"
    assert ledger.models_used()[0]["run"] != "changed"  # callers get copies


def test_code_digests_name_the_loaded_bab_modules_and_find_the_changed_ones(tmp_path):
    import hashlib

    from bab.core.provenance import PACKAGE_ROOT, changed_code, loaded_code_digests

    digests = loaded_code_digests()
    source = PACKAGE_ROOT / "bab" / "core" / "runs.py"
    assert digests["bab/core/runs.py"] == hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    assert all(path.startswith("bab/") and path.endswith(".py") for path in digests)
    (tmp_path / "bab").mkdir()
    (tmp_path / "bab" / "a.py").write_text("x = 1\n")
    (tmp_path / "bab" / "b.py").write_text("y = 2\n")
    recorded = {"bab/a.py": hashlib.sha256(b"x = 1\n").hexdigest()[:16],
                "bab/b.py": hashlib.sha256(b"y = 2\n").hexdigest()[:16],
                "bab/gone.py": "0" * 16}
    assert changed_code(recorded, tmp_path) == ["bab/gone.py"]
    (tmp_path / "bab" / "b.py").write_text("y = 3\n")
    assert changed_code(recorded, tmp_path) == ["bab/b.py", "bab/gone.py"]


# a process asking the run cache for a run that takes a while to train (its fit writes who trained it)
CONCURRENT_TRAINER = """\
import sys, time
from pathlib import Path
import torch
from bab.core.runs import RunCache

root, who, started = sys.argv[1], sys.argv[2], Path(sys.argv[3])
ready = started.with_name("second ready")

def fit(model, checkpoint):
    started.write_text(who)  # the test starts the second process once the first is training
    while not ready.exists():  # hold the run until the second process is about to ask for it
        time.sleep(0.05)
    time.sleep(1.5)
    with torch.no_grad():
        model.weight.fill_(float(len(who)))
    return {"trained_by_process": who}

model = torch.nn.Linear(3, 2)
if who != "first":
    ready.write_text(who)
metrics = RunCache(root).get_or_train("slow", {"lr": 0.1}, model, fit)
print(who, metrics["trained_by_process"], metrics["cached"], float(model.weight[0, 0]), flush=True)
"""


def test_a_second_process_waits_for_the_run_the_first_is_training_and_loads_it(tmp_path):
    import os
    import subprocess
    import sys
    import time

    script = tmp_path / "trainer.py"
    script.write_text(CONCURRENT_TRAINER)
    started = tmp_path / "started"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}  # this checkout's bab
    run = lambda who: subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache"), who, str(started)],  # noqa: E731
                                       stdout=subprocess.PIPE, text=True, env=env)
    first = run("first")
    deadline = time.monotonic() + 60
    while not started.exists():  # the first holds the run's lock and is inside its fit
        assert time.monotonic() < deadline and first.poll() is None, "the first process never started training"
        time.sleep(0.05)
    second = run("second-process")
    out_first, out_second = (p.communicate(timeout=60)[0] for p in (first, second))
    assert out_first.split() == ["first", "first", "False", "5.0"]
    # the second never trained it beside the first: it waited, said so, and loaded the first's weights
    assert "another process is training run slow-" in out_second
    assert out_second.splitlines()[-1].split() == ["second-process", "first", "True", "5.0"]
    assert started.read_text() == "first" and (tmp_path / "cache" / "partial").is_dir()


def test_a_run_names_the_commit_the_checkout_was_at_when_training_started(tmp_path, monkeypatch):
    import bab.core.runs as runs

    head = {"commit": "aaaaaaa"}
    monkeypatch.setattr(runs, "git_commit", lambda *_: head["commit"])

    def fit(model, checkpoint):  # a training of hours, during which the checkout moves on
        head["commit"] = "bbbbbbb"
        return {}

    metrics = RunCache(tmp_path).get_or_train("long", {"lr": 1}, tiny_model(0), fit)
    assert metrics["trained_by"]["commit"] == "aaaaaaa"
    head["commit"] = "ccccccc"
    cache = RunCache(tmp_path)
    assert cache.measured("slow", {"x": 1}, lambda: head.update(commit="ddddddd") or {"v": 1}) == {"v": 1}
    stored = json.loads(cache.measurement_path("slow", {"x": 1}).read_text())
    assert stored["measured_by"]["commit"] == "ccccccc"


def test_profile_paper_refuses_to_train_from_uncommitted_code_but_loads(tmp_path, monkeypatch):
    """The record's models name the commit that trained them: at profile paper a "+dirty" checkout trains nothing
    (an error saying to commit first); a model already cached still loads, and other profiles train."""
    import bab.experiments.study as study_module
    from bab.data.synthetic import SyntheticConfig
    from bab.experiments.synthetic import SyntheticExperiment, SyntheticProfile
    from bab.heads.train import TrainConfig

    step = TrainConfig(objective="dense", epochs=1, batch_size=16)
    sizes = dict(data=SyntheticConfig(seq_len=8, num_train=32, num_val=16),
                 model=dict(d_model=16, num_heads=2, num_layers=1, d_ff=16), dense=step, scratch=step, warm=step,
                 static=step, hard_adapt=step)
    paper = SyntheticExperiment(SyntheticProfile(name="paper", **sizes), cache=RunCache(tmp_path), progress=False)
    monkeypatch.setattr(study_module, "git_commit", lambda: "abc1234+dirty")
    with pytest.raises(ValueError, match=r"abc1234\+dirty.*commit or stash the changes"):
        paper.dense()
    assert not list(tmp_path.glob("synthetic-dense-*"))  # nothing stored
    other_sizes = {**sizes, "data": SyntheticConfig(seq_len=8, num_train=48, num_val=16)}  # a run of its own
    tiny = SyntheticExperiment(SyntheticProfile(name="tiny", **other_sizes), cache=RunCache(tmp_path), progress=False)
    assert tiny.dense()[1]["cached"] is False  # another profile trains from the same checkout
    monkeypatch.setattr(study_module, "git_commit", lambda: "abc1234")
    assert paper.dense()[1]["cached"] is False  # committed: trains
    monkeypatch.setattr(study_module, "git_commit", lambda: "abc1234+dirty")
    assert paper.dense()[1]["cached"] is True  # dirty again: the cached model still loads
    study_module.refuse_uncommitted_training("quick", "abc+dirty")  # only the record's profile is held to it
    with pytest.raises(ValueError, match="run the report again"):
        study_module.refuse_uncommitted_training("paper, 197 tokens", "abc+dirty", doing="run the report")
