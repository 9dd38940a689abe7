"""conftest.py: nbval skips a notebook whose data cannot be resolved, and runs its kernels at the smoke thread count."""

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


def test_notebook_kernels_get_the_smoke_thread_count_and_unit_tests_keep_theirs(monkeypatch):
    from types import SimpleNamespace

    from bab.report.regression import SMOKE_THREADS

    monkeypatch.setenv("BAB_THREADS", "1")  # what a caller asked for
    conftest.pytest_runtest_setup(SimpleNamespace(fspath="tests/core/test_threads.py"))
    assert conftest.os.environ["BAB_THREADS"] == "1"
    conftest.pytest_runtest_setup(SimpleNamespace(fspath="notebooks/06_gpt2_context_pruning.ipynb"))
    assert conftest.os.environ["BAB_THREADS"] == "2" == str(SMOKE_THREADS)
