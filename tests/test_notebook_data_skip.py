"""conftest.py: nbval skips a notebook whose data cannot be resolved, and runs its kernels at the smoke thread count
and instruction sets."""

import os
import platform
import subprocess
import sys

import pytest

import conftest


def test_lm_notebook_is_skipped_with_a_reason_when_its_text_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    reason = conftest._missing_data("06_gpt2_context_pruning.ipynb")
    assert reason and "lm/austen.txt" in reason and str(tmp_path) in reason
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "austen.txt").write_text("It is a truth universally acknowledged.\n")
    assert conftest._missing_data("06_gpt2_context_pruning.ipynb") is None


def test_csv_notebook_check_still_works(tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    reason = conftest._missing_data("02_ag_news_custom.ipynb")
    assert reason and "ag_news/train.csv" in reason
    assert conftest._missing_data("01_synthetic.ipynb") is None  # needs no data


def _run_item(path: str, during) -> None:
    """Drive conftest's wrapper around one test item as pytest does, calling ``during()`` where the item runs."""
    from types import SimpleNamespace

    protocol = conftest.pytest_runtest_protocol(SimpleNamespace(fspath=path), None)
    next(protocol)
    during()
    with pytest.raises(StopIteration):
        protocol.send(True)


def test_notebook_kernels_get_the_smoke_threads_and_instruction_sets_and_unit_tests_keep_theirs(monkeypatch):
    from bab.report.compare.regression import SMOKE_NUMERICS_ENV, SMOKE_THREADS

    monkeypatch.setenv("BAB_THREADS", "2")  # what a caller asked for
    monkeypatch.delenv("BAB_PRECISION", raising=False)  # restored (unset) after the test
    for name in SMOKE_NUMERICS_ENV:
        monkeypatch.delenv(name, raising=False)  # restored after the test, whatever was set before

    def unit_test_environment():
        assert os.environ["BAB_THREADS"] == "2"
        assert not any(name in os.environ for name in SMOKE_NUMERICS_ENV)

    def notebook_environment():
        assert os.environ["BAB_THREADS"] == "1" == str(SMOKE_THREADS)
        assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
        assert os.environ["MKL_CBWR"] == "AVX2"
        assert os.environ["BAB_PRECISION"] == "float32"

    _run_item("tests/core/test_threads.py", unit_test_environment)
    _run_item("notebooks/06_gpt2_context_pruning.ipynb", notebook_environment)
    # a unit test the same worker runs after a notebook: nothing of the kernel's environment left behind
    unit_test_environment()
    assert "BAB_PRECISION" not in os.environ
    _run_item("tests/core/test_blas.py", unit_test_environment)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pinned instruction sets are x86's")
def test_a_kernel_started_with_the_smoke_environment_runs_torch_on_the_pinned_instruction_set():
    from bab.report.compare.regression import smoke_kernel_env

    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {**os.environ, **smoke_kernel_env()}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "AVX2"
