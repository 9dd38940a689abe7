"""The committed start plan: ``reports/planned_seconds.json`` written from a finished build, and read by a build that
has no report of its own to plan on."""

import contextlib
import io
import json
import shutil

import pytest

import bab.report.runner.build as report
import bab.report.runner.schedule as schedule
from bab.__main__ import main as bab_main


def write_runs(reports_dir, profile, records):
    runs = reports_dir / profile / "runs"
    runs.mkdir(parents=True)
    for stem, record in records.items():
        (runs / f"{stem}.json").write_text(json.dumps(record))


def ok(seconds, commit="abc1234"):
    return {"notebook": "x", "status": "ok", "seconds": seconds, "commit": commit, "jobs": 2, "threads": 1,
            "error": None}


def test_a_finished_build_is_saved_per_profile_and_read_back_by_stem(tmp_path):
    write_runs(tmp_path, "quick", {"01_a": ok(500.0), "02_b": ok(1600.5)})
    (tmp_path / schedule.PLAN_FILE).write_text(json.dumps({"paper": {"01_a": {"seconds": 9.0}}}))
    path = schedule.save_plan(tmp_path, "quick")
    saved = json.loads(path.read_text())
    assert saved["paper"] == {"01_a": {"seconds": 9.0}}  # another profile's entry kept
    assert saved["quick"]["02_b"] == {"seconds": 1600.5, "commit": "abc1234", "jobs": 2, "threads": 1}
    assert schedule.planned_runs(tmp_path, "quick", ["02_b", "03_new", "01_a"]) == [
        saved["quick"]["02_b"], None, saved["quick"]["01_a"]]
    assert schedule.planned_runs(tmp_path, "smoke", ["01_a"]) == [None]
    assert schedule.planned_runs(tmp_path / "elsewhere", "quick", ["01_a"]) == [None]
    assert "abc1234" in schedule.plan_note(schedule.planned_runs(tmp_path, "quick", ["01_a"]))


def test_a_build_with_a_failed_notebook_or_none_is_not_saved(tmp_path):
    with pytest.raises(FileNotFoundError, match="no runs in .*build the report first"):
        schedule.save_plan(tmp_path, "quick")
    write_runs(tmp_path, "quick", {"01_a": ok(500.0), "02_b": {**ok(12.0), "status": "failed"}})
    with pytest.raises(ValueError, match=r"did not all end ok \(02_b\)"):
        schedule.save_plan(tmp_path, "quick")
    assert not (tmp_path / schedule.PLAN_FILE).exists()


def test_save_plan_on_the_command_line(tmp_path, capsys):
    write_runs(tmp_path, "quick", {"01_a": ok(500.0)})
    assert bab_main(["report", "timings", "--profile", "quick", "--reports-dir", str(tmp_path), "--save-plan"]) == 0
    assert "planned_seconds.json (quick)" in capsys.readouterr().out
    assert bab_main(["report", "timings", "--profile", "smoke", "--reports-dir", str(tmp_path), "--save-plan"]) == 2
    assert "build the report first" in capsys.readouterr().err


@pytest.fixture
def three_notebooks(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for stem in ("01_a", "02_b", "03_c"):
        (notebooks / f"{stem}.ipynb").write_text("{}")
    return notebooks


def build_in_order(notebooks, reports_dir, monkeypatch, jobs=2):
    """Build with the notebooks' execution replaced by a record; returns (what start_order was given, stdout)."""
    planned = []

    def spy(runs, plan, jobs):
        planned.append({run.stem: None if r is None else r["seconds"] for run, r in zip(runs, plan, strict=True)})
        return list(runs)

    monkeypatch.setattr(report, "start_order", spy)
    monkeypatch.setattr(report, "run_notebook", lambda *a, **k: {"status": "ok", "seconds": 0.0})
    monkeypatch.setattr(report, "write_index", lambda *a, **k: None)
    monkeypatch.setattr(report, "write_record", lambda *a, **k: None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report.build_report("quick", notebooks, reports_dir, jobs=jobs)
    return planned, out.getvalue()


def test_a_build_with_no_report_plans_on_the_committed_seconds(three_notebooks, tmp_path, monkeypatch):
    reports_dir = tmp_path / "reports"
    reports_dir.mkdir()
    (reports_dir / schedule.PLAN_FILE).write_text(json.dumps(
        {"quick": {"01_a": {"seconds": 5.0, "commit": "c0ffee1"}, "03_c": {"seconds": 30.0, "commit": "c0ffee1"}}}))
    planned, stdout = build_in_order(three_notebooks, reports_dir, monkeypatch)
    assert planned == [{"01_a": 5.0, "02_b": None, "03_c": 30.0}]
    assert "planned on the committed seconds of a build at c0ffee1" in stdout
    assert "[3/3] 03_c ... (no previous run)" in stdout  # the estimate still speaks of this folder's runs

    # once this folder has a report of its own, its runs plan the next build and the committed seconds are unused
    shutil.rmtree(reports_dir / "quick")
    write_runs(reports_dir, "quick", {stem: ok(s) for stem, s in (("01_a", 7.0), ("02_b", 8.0), ("03_c", 9.0))})
    planned, stdout = build_in_order(three_notebooks, reports_dir, monkeypatch)
    assert planned == [{"01_a": 7.0, "02_b": 8.0, "03_c": 9.0}] and "committed seconds" not in stdout


def test_one_job_or_no_plan_keeps_notebook_order_without_a_note(three_notebooks, tmp_path, monkeypatch):
    reports_dir = tmp_path / "reports"
    planned, stdout = build_in_order(three_notebooks, reports_dir, monkeypatch)
    assert planned == [{"01_a": None, "02_b": None, "03_c": None}] and "committed seconds" not in stdout
    (reports_dir / schedule.PLAN_FILE).write_text(json.dumps({"quick": {"03_c": {"seconds": 30.0}}}))
    planned, stdout = build_in_order(three_notebooks, reports_dir, monkeypatch, jobs=1)
    assert planned == [] and "committed seconds" not in stdout  # one job: name order, nothing planned
