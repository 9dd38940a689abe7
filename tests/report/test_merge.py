"""Merging another build's finished notebooks into a report folder (its pages' rebuild is replaced by a recorder:
``tests/report/test_record.py`` tests that rebuild on the committed record)."""

import json

import pytest

import bab.report.runner.build
from bab.__main__ import main
from bab.report.compare.merge import merge_report


def report(folder, profile, runs: dict, finished_at=None):
    """A report folder holding ``runs``: name -> status, each with its notebook, page, rows and outcomes
    (``finished_at``: name -> the time its run record gives)."""
    (folder / "runs").mkdir(parents=True)
    (folder / "results").mkdir()
    (folder / "results.json").write_text(json.dumps({"profile": profile, "claims": []}))
    for name, status in runs.items():
        (folder / "runs" / f"{name}.json").write_text(json.dumps(
            {"notebook": name, "status": status, "finished_at": (finished_at or {}).get(name)}))
        (folder / f"{name}.ipynb").write_text(f"{folder.parent.name} {name}")
        (folder / f"{name}.html").write_text(f'<link rel="stylesheet" href="notebook-{len(name):012x}.css"> {name}')
        (folder / f"notebook-{len(name):012x}.css").write_text("css")
        (folder / "results" / f"{name}.json").write_text(f"{folder.parent.name} rows")
        (folder / "results" / f"{name}.outcomes.npz").write_text(f"{folder.parent.name} outcomes")
    return folder


@pytest.fixture
def rebuilt(monkeypatch):
    """Each rebuild's folder listing, instead of rebuilding."""
    calls = []

    def record(folder, notebooks_dir="notebooks"):
        calls.append(sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()))
        return folder / "index.html"

    monkeypatch.setattr(bab.report.runner.build, "rebuild_pages", record)
    return calls


def test_a_seeded_run_replaces_the_unseeded_one_and_brings_its_files(tmp_path, rebuilt):
    target = report(tmp_path / "record" / "paper", "paper", {"03_bert_ag_news": "ok", "05_vit_sparsifiner": "ok"})
    source = report(tmp_path / "build" / "paper", "paper", {"03_bert_ag_news-seed7": "ok", "05_vit_sparsifiner": "ok",
                                                            "04_dbpedia_bert": "failed"})
    assert merge_report(source, target, only=["03", "04"]) == (["03_bert_ag_news-seed7"], [])
    files = set(rebuilt[0])
    assert {"03_bert_ag_news-seed7.ipynb", "03_bert_ag_news-seed7.html", "runs/03_bert_ag_news-seed7.json",
            "results/03_bert_ag_news-seed7.json", "results/03_bert_ag_news-seed7.outcomes.npz",
            f"notebook-{len('03_bert_ag_news-seed7'):012x}.css"} <= files
    assert not any(f.startswith(("03_bert_ag_news.", "runs/03_bert_ag_news.", "results/03_bert_ag_news."))
                   for f in files)
    assert not any("04_dbpedia_bert" in f for f in files)  # it failed in the build: not merged
    assert (target / "05_vit_sparsifiner.ipynb").read_text() == "record 05_vit_sparsifiner"  # not chosen: kept
    assert (target / "03_bert_ag_news-seed7.ipynb").read_text() == "build 03_bert_ag_news-seed7"
    assert not any(p.name.startswith(".merging") for p in target.parent.iterdir())


def test_an_unseeded_run_replaces_every_seeded_run_of_its_notebook(tmp_path, rebuilt):
    target = report(tmp_path / "record" / "paper", "paper", {"06_gpt2_context_pruning-seed7": "ok",
                                                             "06_gpt2_context_pruning-seed13": "ok"})
    source = report(tmp_path / "build" / "paper", "paper", {"06_gpt2_context_pruning": "ok"})
    merge_report(source, target)
    assert [f for f in rebuilt[0] if f.startswith("runs/")] == ["runs/06_gpt2_context_pruning.json"]


def test_the_records_newer_runs_are_kept_and_the_builds_folder_is_named_report(tmp_path, rebuilt):
    """A build's folder starts as a copy of the record: its copies of runs the record has since replaced must not
    come back, and the notebooks it ran name their results by <report>, not by this machine's folder."""
    old, new, newest = "2026-11-20T08:00:00+00:00", "2026-11-29T09:32:11+00:00", "2026-11-29T11:00:00+00:00"
    target = report(tmp_path / "record" / "paper", "paper", {"04_dbpedia_bert-seed7": "ok", "03_bert_ag_news": "ok"},
                    {"04_dbpedia_bert-seed7": new, "03_bert_ag_news": old})
    source = report(tmp_path / "build" / "paper", "paper", {"04_dbpedia_bert": "ok", "03_bert_ag_news": "ok"},
                    {"04_dbpedia_bert": old, "03_bert_ag_news": newest})
    (source / "03_bert_ag_news.ipynb").write_text(f'"results_path": "{source}/results/03_bert_ag_news.json"')
    assert merge_report(source, target) == (["03_bert_ag_news"], ["04_dbpedia_bert"])
    assert [f for f in rebuilt[0] if f.startswith("runs/")] == ["runs/03_bert_ag_news.json",
                                                               "runs/04_dbpedia_bert-seed7.json"]
    assert (target / "03_bert_ag_news.ipynb").read_text() == '"results_path": "<report>/results/03_bert_ag_news.json"'
    with pytest.raises(ValueError, match="already holds runs as new as 04_dbpedia_bert"):
        merge_report(source, target, only=["04"])


def test_a_failed_rebuild_leaves_the_record_as_it_was(tmp_path, monkeypatch):
    target = report(tmp_path / "record" / "paper", "paper", {"03_bert_ag_news": "ok"})
    source = report(tmp_path / "build" / "paper", "paper", {"03_bert_ag_news-seed7": "ok"})
    before = sorted(p.name for p in target.rglob("*"))

    def fail(folder, notebooks_dir="notebooks"):
        raise ValueError("the comparison table failed")

    monkeypatch.setattr(bab.report.runner.build, "rebuild_pages", fail)
    with pytest.raises(ValueError, match="comparison table failed"):
        merge_report(source, target)
    assert sorted(p.name for p in target.rglob("*")) == before
    assert not any(p.name.startswith(".merging") for p in target.parent.iterdir())


def test_the_command_refuses_other_profiles_and_empty_merges_with_advice(tmp_path, capsys, rebuilt):
    report(tmp_path / "record" / "paper", "paper", {"03_bert_ag_news": "ok"})
    report(tmp_path / "quick" / "quick", "quick", {"03_bert_ag_news": "ok"})
    report(tmp_path / "build" / "paper", "paper", {"04_dbpedia_bert": "failed"})
    argv = ["report", "merge", "--profile", "paper", "--reports-dir", str(tmp_path / "record")]
    assert main([*argv, str(tmp_path / "quick" / "quick")]) == 2
    assert "merge only reports of the same profile" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "build" / "paper")]) == 2
    err = capsys.readouterr().err
    assert "no run in" in err and "(04_dbpedia_bert did not): nothing to merge" in err
    assert main([*argv, str(tmp_path / "nowhere")]) == 2
    assert "holds no results.json" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "build" / "paper"), "--only", "4"]) == 2
    assert "two-digit notebook prefixes" in capsys.readouterr().err
    assert rebuilt == []
