"""`python -m bab fit sparsifiner`: an image folder in, one folder of results out (as `fit heads`)."""

import json

import api_fixtures
import numpy as np
import pytest
import torch
from PIL import Image

from bab.__main__ import main


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    api_fixtures.write_image_folders(root, {"train": 24, "test": 8})
    return root


@pytest.fixture
def command(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BAB_THREADS", "1")

    def run(out, *extra):
        return main(["fit", "sparsifiner", "--train", str(folders / "train"), "--test", str(folders / "test"),
                     "--out", str(out), "--image-size", "8", "--patch-size", "2", "--epochs", "12,1,2",
                     "--batch-size", "16", "--keep-rates", "0.5,0.25", "--quiet", *extra])
    return run


def test_fit_sparsifiner_writes_every_artefact_and_the_model_reloads(command, folders, tmp_path, capsys):
    from transformers import ViTForImageClassification

    from bab.sparsifiner.attach import load_attached
    from bab.sparsifiner.vit import vit_forward

    out = tmp_path / "out"
    assert command(out) == 0
    printed = capsys.readouterr().out
    assert "on 24 test images: dense" in printed and f"wrote {out}/" in printed
    assert sorted(p.name for p in out.iterdir()) == ["accuracy_cost.png", "metrics.json", "model", "summary.html",
                                                     "sweep.csv"]
    metrics = json.loads((out / "metrics.json").read_text())  # strict JSON: NaN would not parse as null
    assert metrics["labels"] == ["horizontal", "square", "vertical"] and metrics["test_images"] == 24
    sweep = metrics["sweep"]
    assert [(r["attention"], r["keep_rate"]) for r in sweep] == [("dense", None), ("sparsifiner", 0.5),
                                                                  ("sparsifiner", 0.25)]
    assert sweep[0]["vs_dense"] is None
    assert sweep[2]["vs_dense_low"] <= sweep[2]["vs_dense"] <= sweep[2]["vs_dense_high"]
    assert sweep[0]["accuracy"] > 100 / 3 + 20  # three balanced classes: chance is 33%
    assert sweep[2]["cost"] < sweep[1]["cost"]
    # the saved model, reloaded with its predictors, gives the sweep's accuracy at keep 0.25 on the test images
    model = load_attached(ViTForImageClassification, str(out / "model")).eval()
    prep = json.loads((out / "model" / "preprocessing.json").read_text())
    pixels, labels = [], []
    for i, label in enumerate(prep["labels"]):
        for path in sorted((folders / "test" / label).glob("*.png")):
            pixels.append(np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255.0)
            labels.append(i)
    x = (torch.tensor(np.stack(pixels))[:, None] - prep["mean"][0]) / prep["std"][0]
    with torch.no_grad():
        predicted = vit_forward(model, x, attention="masked", keep_rate=0.25).logits.argmax(-1)
    assert 100.0 * (predicted == torch.tensor(labels)).float().mean().item() == pytest.approx(sweep[2]["accuracy"])
    assert "Sparsifiner: fit summary" in (out / "summary.html").read_text()


def test_bad_inputs_exit_2_before_training(command, folders, tmp_path, capsys):
    out = tmp_path / "out"
    assert command(out, "--keep-rates", "0.5,1.5") == 2
    assert "keep" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    assert command(tmp_path / "full") == 2
    assert "is not empty" in capsys.readouterr().err and (tmp_path / "full" / "mine.txt").exists()
    unseen = tmp_path / "unseen"
    (unseen / "circles").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(unseen / "circles" / "0.png")
    assert main(["fit", "sparsifiner", "--train", str(folders / "train"), "--test", str(unseen), "--out",
                 str(out), "--image-size", "8", "--patch-size", "2", "--quiet"]) == 2
    assert "circles" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "runs").exists()  # refused before anything trained or was written


def test_a_repeated_fit_loads_from_the_run_cache_and_replaces_out_only_with_overwrite(command, tmp_path, capsys):
    out = tmp_path / "out"

    def stored_runs():  # each trained run's files in the run cache, with when they were written
        return {p.relative_to(tmp_path): p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*")
                if p.name in ("model.safetensors", "metrics.json")}

    assert command(out) == 0
    first, trained = json.loads((out / "metrics.json").read_text()), stored_runs()
    assert len(trained) >= 6  # dense, phase 1 and phase 2: a model and its metrics each
    assert command(out, "--overwrite") == 0
    second = json.loads((out / "metrics.json").read_text())
    assert second["sweep"] == first["sweep"] and second["history"] == first["history"]  # the same models, loaded
    assert stored_runs() == trained  # nothing trained or written again
