"""Where training runs (bab.core.device): the choice, its errors, and what it changes in the run cache's keys."""

import pytest
import torch

from bab.core import device as device_module
from bab.core.blas import blas_key
from bab.core.device import default_device, training_device


def test_the_default_is_auto_and_auto_means_the_gpu_only_when_torch_sees_one(monkeypatch):
    monkeypatch.delenv("BAB_DEVICE", raising=False)
    assert default_device() == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert training_device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert training_device() == "cuda"
    assert training_device("cpu") == "cpu"  # a GPU machine can keep its training on the CPU
    monkeypatch.setenv("BAB_DEVICE", "cpu")
    assert training_device() == "cpu"


def test_cuda_without_a_gpu_is_refused_saying_what_to_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"sees no GPU.*--device cpu"):
        training_device("cuda")
    monkeypatch.setenv("BAB_DEVICE", "cuda")
    with pytest.raises(ValueError, match="sees no GPU"):
        training_device()


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "cuda:0"])
def test_an_unknown_device_is_refused_naming_the_choices(monkeypatch, bad):
    with pytest.raises(ValueError, match=r"device must be one of \('auto', 'cpu', 'cuda'\)"):
        training_device(bad)
    monkeypatch.setenv("BAB_DEVICE", bad)
    with pytest.raises(ValueError, match=r"\$BAB_DEVICE must be one of"):
        default_device()


def test_the_accelerator_is_told_to_stay_on_the_cpu_when_the_device_is_cpu(monkeypatch):
    from bab.core import training

    made = []
    monkeypatch.setattr(training, "Accelerator", lambda cpu: made.append(cpu))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for device, cpu in (("cpu", True), ("auto", False), ("cuda", False)):
        monkeypatch.setenv("BAB_DEVICE", device)
        training.make_accelerator()
        assert made[-1] is cpu


def test_a_run_trained_on_a_gpu_is_keyed_apart_and_a_cpu_run_keeps_its_key(tmp_path, monkeypatch):
    from bab.core.runs import RunCache, train_cached

    cache, trained = RunCache(tmp_path), []

    def fit(model, checkpoint):
        trained.append(model)
        return {"loss": 0.0}

    def run():
        return train_cached(cache, "dense", {"data": "x"}, lambda: torch.nn.Linear(2, 2), fit, seed=1,
                            method="heads", version=3)

    _, _, cpu_lineage = run()
    # the key a CPU run had before the device could be chosen: method, version and threads (and the matrix kernels
    # where bab.core.blas changed them)
    assert cpu_lineage["code"] == {"method": "heads", "version": 3, "threads": torch.get_num_threads(), **blas_key()}
    monkeypatch.setattr(device_module, "training_device", lambda: "cuda")
    model, metrics, gpu_lineage = run()
    assert gpu_lineage["code"]["device"] == "cuda" and not metrics["cached"] and len(trained) == 2
    assert cache.path("dense", gpu_lineage) != cache.path("dense", cpu_lineage)
    assert next(model.parameters()).device.type == "cpu"  # handed back where evaluations run
    monkeypatch.undo()
    assert run()[1]["cached"] and len(trained) == 2  # the CPU run is still found under its old key
