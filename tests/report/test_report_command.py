"""``python -m bab report`` as subcommands, and the mode flags it took before them, which still work for one release
after one line on stderr naming the new spelling."""

import json

import pytest

from bab.__main__ import main

OK_RUN = {"notebook": "01_a", "status": "ok", "seconds": 5.0, "commit": "abc1234", "jobs": 1, "threads": 1,
          "error": None}
RESULTS = {"profile": "quick", "generated_at": "2026-11-25T00:00:00+00:00",
           "claims": [{"id": "a", "paper": "sparsifiner", "recipe": "paper", "where": "Table 2", "claim": "c.",
                       "metric": "points", "setup": "s", "verdict": "reproduced", "ours": 1.0, "low": 0.9,
                       "high": 1.1, "theirs": 1.0, "why": ""}]}


@pytest.fixture
def built(tmp_path):
    """reports/quick with one finished run and a results.json, and an earlier results.json beside it."""
    folder = tmp_path / "reports" / "quick"
    (folder / "runs").mkdir(parents=True)
    (folder / "runs" / "01_a.json").write_text(json.dumps(OK_RUN))
    (folder / "results.json").write_text(json.dumps(RESULTS))
    (tmp_path / "before.json").write_text(json.dumps(RESULTS))
    return tmp_path


def where(root):
    return ["--profile", "quick", "--reports-dir", str(root / "reports")]


@pytest.mark.parametrize("old, new", [
    (["--save-plan"], ["timings", "--save-plan"]),
    (["--verdicts-against", "{root}/before.json"], ["compare", "--verdicts", "{root}/before.json"]),
])
def test_an_old_flag_does_what_its_subcommand_does_after_one_line_naming_it(built, capsys, old, new):
    fill = [word.replace("{root}", str(built)) for word in old + new]
    old, new = fill[:len(old)], fill[len(old):]
    assert main(["report", *new, *where(built)]) == 0
    by_subcommand = capsys.readouterr()
    assert by_subcommand.err == ""
    assert main(["report", *where(built), *old]) == 0
    by_flag = capsys.readouterr()
    assert by_flag.out == by_subcommand.out
    assert by_flag.err.count("\n") == 1 and f"{old[0]} is deprecated" in by_flag.err
    assert f"use: python -m bab report {new[0]}" in by_flag.err


def test_the_old_record_only_flag_names_report_pages(built, capsys):
    folder = built / "reports" / "quick"
    assert main(["report", "--record-only", str(folder)]) == 0
    err = capsys.readouterr().err
    assert err == (f"python -m bab report: --record-only is deprecated and goes in the next release; use: "
                   f"python -m bab report pages {folder} --record-only\n")
    assert (folder / "RECORD.md").is_file()


def test_two_old_mode_flags_are_bad_input_not_a_precedence(built, capsys):
    assert main(["report", *where(built), "--timings", "--save-plan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--timings, --save-plan each choose what report does" in err


@pytest.mark.parametrize("argv, message", [
    (["report", "pages", "{root}/nowhere"], "holds no results.json"),
    (["report", "timings", "--reports-dir", "{root}/reports"], "holds no executed notebook"),
    (["report", "compare", "--reports-dir", "{root}/reports", "--rows", "{root}/nowhere"], "holds no results/*.json"),
    (["report", "merge", "{root}/nowhere", "--reports-dir", "{root}/reports"], "holds no results.json"),
    (["report", "run", "--profile", "fast"], "unknown profile 'fast'"),
])
def test_each_subcommand_refuses_bad_input_in_one_line_before_any_work(built, capsys, argv, message):
    assert main([word.replace("{root}", str(built)) for word in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_compare_takes_rows_or_verdicts_never_both(built, capsys):
    assert main(["report", "compare", *where(built), "--rows", "a", "--verdicts", "b"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_error_once_the_pages_are_being_written_is_a_failure_with_its_traceback(built, capsys, monkeypatch):
    import bab.report.runner.build as build

    def fails(*args, **kwargs):
        raise ValueError("a bug in the page code")

    monkeypatch.setattr(build, "rebuild_pages", fails)
    assert main(["report", "pages", str(built / "reports" / "quick")]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: a bug in the page code" in err
