"""`python -m bab report timings`: an executed notebook's seconds by kind of cell, from papermill's records."""

import json

import pytest

from bab.report.runner import timings


def executed(path, cells, start="2026-01-01T00:00:00+00:00", duration=100.0):
    """A notebook as papermill writes it: each code cell's duration and start, the notebook's start and duration."""
    notebook = {"metadata": {"papermill": {"start_time": start, "duration": duration}}, "cells": []}
    for i, (source, seconds) in enumerate(cells):
        notebook["cells"].append({"cell_type": "code", "source": source, "metadata": {"papermill": {
            "duration": seconds, "start_time": f"2026-01-01T00:00:{2 + i:02d}+00:00"}}})
    notebook["cells"].insert(1, {"cell_type": "markdown", "source": "# words", "metadata": {}})
    path.write_text(json.dumps(notebook))
    return path


@pytest.mark.parametrize("source, kind", [
    ("dense, metrics, _ = study.dense()", "training"),
    ("model, metrics = study.pruned(gamma)", "training"),
    ("latency = study.latency(models)", "benchmark"),
    ("sweep = study.sweep(warm, P.sweep_budgets)", "evaluation"),
    ("fig = plots.gate_heatmaps(g)\nplt.show()", "figures"),
    ("import torch\nfrom bab.heads import plots\n\nset_threads(threads)", "imports"),
    ("# study.dense() in a comment only\nrows = save_results(rows, path)", "other"),
])
def test_each_cell_is_put_in_one_kind_by_what_it_calls(source, kind):
    assert timings.kind_of(source) == kind


def test_a_reports_notebooks_are_summed_by_kind(tmp_path):
    executed(tmp_path / "01_a.ipynb", [("import torch", 0.5), ("dense, _, _ = study.dense()", 60.0),
                                        ("sweep = study.sweep(m, b)", 20.0), ("print(1)", 1.5)])
    executed(tmp_path / "02_b.ipynb", [("latency = study.latency(m)", 30.0)], duration=40.0)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "01_a.json").write_text(json.dumps({
        "models": [{"run": "dense", "cached": False, "train_seconds": 55.0},
                   {"run": "loaded", "cached": True, "train_seconds": 900.0}],  # trained by an earlier run
        "measurements": [{"measurement": "sweep", "cached": False, "seconds": 12.5}]}))
    table, slowest = timings.report_timings(tmp_path)
    a = table.loc["01_a"]
    assert (a["in all"], a["kernel start"], a["training"], a["evaluation"], a["imports"], a["other"]) == \
        (100.0, 2.0, 60.0, 20.0, 0.5, 1.5)
    assert (a["trained"], a["measured"]) == (55.0, 12.5)
    assert table.loc["02_b", ["trained", "measured"]].isna().all()  # no results file: nothing to say
    assert table.loc["all notebooks", "in all"] == 140.0 and table.loc["all notebooks", "benchmark"] == 30.0
    assert table.loc["all notebooks", "trained"] == 55.0
    assert slowest["seconds"].tolist()[:2] == [60.0, 30.0] and slowest["notebook"].tolist()[:2] == ["01_a", "02_b"]
    with pytest.raises(FileNotFoundError, match="build the report first"):
        timings.report_timings(tmp_path / "empty")
