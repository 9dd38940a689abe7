"""A rebuilt report's verdicts beside an earlier report's, read from two results.json files."""

import json

import pytest

from bab.__main__ import main
from bab.report.compare.verdict_changes import changes_markdown, estimate_text, verdict_changes


def claim(claim_id, verdict, ours=None, low=None, high=None, recipe="paper", why=""):
    return {"id": claim_id, "recipe": recipe, "verdict": verdict, "ours": ours, "low": low, "high": high, "why": why}


BEFORE = {"claims": [claim("a", "reproduced", 0.9, 0.85, 0.95), claim("b", "inconclusive", 1.2, 0.9, 1.5),
                     claim("old", "not run")]}
NOW = {"claims": [claim("b", "reproduced", 1.31, 1.2, 1.42, why="1.31x | limit 1.4x"),
                  claim("a", "reproduced", 0.91, 0.9, 0.92, recipe="ours"), claim("fresh", "inconclusive", 2.0)]}


def test_claims_are_matched_by_id_in_the_new_reports_order_then_the_gone_ones():
    table = verdict_changes(BEFORE, NOW)
    assert table.id.tolist() == ["b", "a", "fresh", "old"]
    assert table.change.tolist() == ["changed", "same", "new", "gone"]
    assert table["verdict before"].tolist() == ["inconclusive", "reproduced", "-", "not run"]
    assert table["verdict now"].tolist() == ["reproduced", "reproduced", "inconclusive", "-"]
    assert table.before.tolist() == ["1.2 [0.9, 1.5]", "0.9 [0.85, 0.95]", "-", "-"]
    assert table.now.tolist() == ["1.31 [1.2, 1.42]", "0.91 [0.9, 0.92]", "2", "-"]
    assert table.recipe.tolist() == ["paper", "ours", "paper", "paper"]


def test_an_exact_number_is_shown_without_an_interval():
    assert estimate_text(claim("x", "reproduced", 3.0, 3.0, 3.0)) == "3"
    assert estimate_text(None) == "-" and estimate_text(claim("x", "not run")) == "-"


def test_markdown_escapes_pipes_and_counts_the_changes():
    text = changes_markdown(verdict_changes(BEFORE, NOW))
    lines = text.splitlines()
    assert lines[0].startswith("| id | recipe | verdict before |") and len(lines) == 2 + 4 + 2
    assert "1.31x \\| limit 1.4x" in lines[2]
    assert lines[-1] == "4 claims: 1 same, 1 changed, 1 new, 1 gone."


def test_two_files_without_claims_are_refused():
    with pytest.raises(ValueError, match="neither results.json holds any claims"):
        verdict_changes({}, {"claims": []})


def test_the_report_command_prints_the_table_and_refuses_a_missing_file(tmp_path, capsys):
    folder = tmp_path / "reports" / "paper"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(NOW))
    (tmp_path / "before.json").write_text(json.dumps(BEFORE))
    argv = ["report", "compare", "--profile", "paper", "--reports-dir", str(tmp_path / "reports"), "--verdicts"]
    assert main([*argv, str(tmp_path / "before.json")]) == 0
    assert capsys.readouterr().out.strip().endswith("4 claims: 1 same, 1 changed, 1 new, 1 gone.")
    assert main([*argv, str(tmp_path / "missing.json")]) == 2
    assert "no readable results.json" in capsys.readouterr().err


def test_the_report_command_takes_an_earlier_report_folder(tmp_path, capsys):
    folder, before = tmp_path / "reports" / "paper", tmp_path / "before" / "paper"
    for path, results in ((folder, NOW), (before, BEFORE)):
        path.mkdir(parents=True)
        (path / "results.json").write_text(json.dumps(results))
    argv = ["report", "compare", "--profile", "paper", "--reports-dir", str(tmp_path / "reports"), "--verdicts"]
    assert main([*argv, str(before)]) == 0
    assert capsys.readouterr().out.strip().endswith("4 claims: 1 same, 1 changed, 1 new, 1 gone.")


def test_a_report_compared_with_its_own_results_has_every_claim_the_same(tmp_path, capsys):
    folder = tmp_path / "reports" / "paper"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(NOW))
    argv = ["report", "compare", "--profile", "paper", "--reports-dir", str(tmp_path / "reports"), "--verdicts"]
    assert main([*argv, str(folder / "results.json")]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{len(NOW['claims'])} claims: {len(NOW['claims'])} same, "
                                                    "0 changed, 0 new, 0 gone.")
