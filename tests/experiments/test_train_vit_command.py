"""`python -m bab train 05`: notebook 05's trainings into the run cache, under the keys its own calls use."""

from dataclasses import replace

import pytest
import torch

from bab.__main__ import main
from bab.experiments import profiles, vit
from bab.experiments.profiles import get_profile


@pytest.fixture
def tiny_notebook(tiny_vit_study, tmp_path, monkeypatch):
    """The command on a tiny study of random images: every profile name resolves to its profile, the command's
    studies read its images, and the run cache is empty. Returns (profile, the notebook's study class)."""
    smoke = get_profile("vit_sparsifiner", "smoke")
    tiny, data = tiny_vit_study(phase2=replace(smoke.phase2, epochs=1, batch_size=8), variant_197=None)

    class TinyViTStudy(vit.ViTStudy):
        def splits(self):
            return {"train": data, "val": data, "test": data}

    monkeypatch.setattr(profiles, "get_profile", lambda experiment, name: tiny.profile)
    monkeypatch.setattr(vit, "ViTStudy", TinyViTStudy)
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BAB_THREADS", str(torch.get_num_threads()))  # the command sets it: leave it as it is
    return tiny.profile, TinyViTStudy


def test_train_vit_stores_the_runs_the_notebooks_calls_then_load(tiny_notebook, capsys):
    profile, notebook_study_class = tiny_notebook
    assert main(["train", "05", "--profile", "smoke", "linformer"]) == 0
    out = capsys.readouterr().out
    assert "linformer: trained" in out and "from the run cache" not in out  # its dense teacher trained on the way

    # the notebook's own calls, in a fresh study on the same cache, load what the command trained
    notebook_study = notebook_study_class(profile, progress=False)
    assert notebook_study.dense()[1]["cached"] is True
    assert notebook_study.linformer()[1]["cached"] is True
    assert notebook_study.budgeted_heads()[1]["cached"] is False  # a part not asked for was not trained

    assert main(["train", "05", "--profile", "smoke", "dense", "linformer"]) == 0
    out = capsys.readouterr().out
    assert "dense: from the run cache" in out and "linformer: from the run cache" in out and "trained," not in out


def test_train_vit_trains_only_the_presets_named_in_their_order(tiny_notebook, capsys):
    profile, notebook_study_class = tiny_notebook
    assert main(["train", "05", "--profile", "smoke", "preset-official"]) == 0
    out = capsys.readouterr().out
    trained = [line.split(":")[0] for line in out.splitlines() if line.startswith("preset ")]
    assert trained == ["preset official, phase 1", "preset official, phase 2"]

    notebook_study = notebook_study_class(profile, progress=False)
    assert notebook_study.preset_study("official").sparsifiner()[1]["cached"] is True
    assert notebook_study.preset_study("paper_text").predictor()[1]["cached"] is False  # not named: not trained


def test_train_vit_refuses_a_part_the_profile_lacks(tiny_notebook, tmp_path, capsys):
    assert main(["train", "05", "--profile", "smoke", "dense", "197"]) == 2
    err = capsys.readouterr().err
    assert "has no step '197'" in err and "choose among dense, preset-profile" in err and "control" not in err
    assert not (tmp_path / "runs").exists()  # refused before anything trained


def test_train_vit_refuses_an_unknown_preset(tiny_notebook, tmp_path, capsys):
    assert main(["train", "05", "--profile", "smoke", "preset-offical"]) == 2
    err = capsys.readouterr().err
    assert "no step 'preset-offical'" in err and "preset-paper_text, preset-official" in err
    assert not (tmp_path / "runs").exists()


def test_train_05_help_lists_the_steps_the_profile_has(tiny_notebook, capsys):
    assert main(["train", "05", "--profile", "smoke", "--help"]) == 0
    out = capsys.readouterr().out
    assert "training steps at profile smoke" in out
    for step in ("dense", "preset-official", "presets", "evit", "heads", "linformer"):
        assert f"  {step} " in out
    assert "  197 " not in out  # the tiny profile has no 197-token variant
