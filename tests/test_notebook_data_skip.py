"""conftest.py: nbval skips a notebook whose data (CSV data set or LM text) cannot be resolved."""

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
