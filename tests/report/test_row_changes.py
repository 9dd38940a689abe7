"""Two builds of a report row by row (``python -m bab report compare --rows``): accuracies paired on the same test
examples, perplexities on the same windows, matched by unit id whatever order each build scored them in; the
intervals here are worked out by hand from the bootstrap's draw probabilities."""

import json
import math

import numpy as np
import pytest

from bab.__main__ import main as bab_main
from bab.core import outcomes
from bab.report.compare.row_changes import changes_summary, row_changes

ACCURACY = {"experiment": "synthetic", "method": "dense", "budget": 1.0, "seeds": [7]}
SURE = {"experiment": "synthetic", "method": "hard", "budget": 0.5, "seeds": [7]}
PERPLEXITY = {"experiment": "lm", "method": "dense", "budget": None, "seeds": [7]}
UNSCORED = {"experiment": "synthetic", "method": "static", "budget": 0.5, "seeds": [7]}


def build(folder, rows, kept):
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "01_x.json").write_text(json.dumps({"notebook": "01_x", "rows": rows}))
    outcomes.write(folder / "results" / "01_x.outcomes.npz",
                   {outcomes.outcome_key(row, kind): np.asarray(value) for row, kind, value in kept})


@pytest.fixture
def builds(tmp_path):
    before, now = tmp_path / "before", tmp_path / "now"
    ids = np.array([10, 20, 30, 40], dtype=np.int64)
    build(before, [{**ACCURACY, "accuracy": 50.0}, {**SURE, "accuracy": 0.0}, {**PERPLEXITY, "perplexity": 7.39},
                   {**UNSCORED, "accuracy": 60.0}, {**ACCURACY, "method": "only before", "accuracy": 1.0}],
          [(ACCURACY, "correct", [True, True, False, False]), (ACCURACY, "unit_ids", ids),
           (SURE, "correct", [False] * 5),
           (PERPLEXITY, "window_nll", [1.0, 2.0, 3.0]), (PERPLEXITY, "window_tokens", [1.0, 1.0, 1.0])])
    # the now build scored the same four examples in reverse order: the third (id 30) is now right
    build(now, [{**ACCURACY, "accuracy": 75.0}, {**SURE, "accuracy": 100.0}, {**PERPLEXITY, "perplexity": 10.3},
                {**UNSCORED, "accuracy": 61.0}, {**ACCURACY, "method": "only now", "accuracy": 1.0}],
          [(ACCURACY, "correct", [False, True, True, True]), (ACCURACY, "unit_ids", ids[::-1]),
           (SURE, "correct", [True] * 5),
           (PERPLEXITY, "window_nll", [1.0, 2.0, 4.0]), (PERPLEXITY, "window_tokens", [1.0, 1.0, 1.0])])
    return before, now


def test_each_shared_metric_is_paired_on_the_same_units_with_its_interval(builds):
    table = row_changes(*builds).set_index("method")
    assert list(table.index) == ["dense", "hard", "dense", "static"]  # rows only one build has are left out
    accuracy = table.iloc[0]
    # per example now - before, matched by id: [0, 0, +1, 0]; mean +25 points. Four draws: none hits the +1 with
    # probability 0.32 (> 2.5%), at most three with 0.996 (at most two: 0.949 < 97.5%): [0, 75]
    assert (accuracy["before"], accuracy["now"]) == (50.0, 75.0)
    assert accuracy["change"] == "+25.00 [+0.00, +75.00] points" and accuracy["holds"] == "yes"
    assert table.loc["hard", "change"] == "+100.00 [+100.00, +100.00] points"  # every example flipped: no spread
    assert table.loc["hard", "holds"] == "no"
    # window nll differences [0, 0, +1] over 3 tokens: exp(1/3); no +1 drawn with p 0.30, all three with 0.037
    perplexity = table.iloc[2]
    assert perplexity["metric"] == "perplexity"
    assert perplexity["change"] == f"{math.exp(1 / 3):.4f} [1.0000, {math.e:.4f}]x" and perplexity["holds"] == "yes"
    assert table.loc["static", "change"] == "-" and table.loc["static", "holds"] == "no outcomes"
    # each new value against the earlier one's own interval: 2 of 4 right is Wilson [15, 85]% (75 inside), 0 of 5
    # is [0, 43.4]% (100 outside); window nll [1, 2, 3] gives perplexity e^2 in [e^1, e^3] (all three draws the
    # lowest window with p 1/27 > 2.5%), and 10.3 lies inside
    assert table["inside before's interval"].tolist() == ["yes", "no", "yes", "no outcomes"]
    assert changes_summary(table) == ("2 of 4 changes hold (interval covers no change), 1 do not, 1 without "
                                      "outcomes; 2 of 4 new values lie inside the earlier value's interval")


def test_units_not_the_same_in_both_builds_are_not_paired(builds, tmp_path):
    before, _ = builds
    other = tmp_path / "other"
    build(other, [{**ACCURACY, "accuracy": 75.0}],
          [(ACCURACY, "correct", [False, True, True, True]),
           (ACCURACY, "unit_ids", np.array([10, 20, 30, 99], dtype=np.int64))])
    assert row_changes(before, other)["holds"].tolist() == ["no outcomes"]


def test_the_command_prints_the_table_and_a_folder_without_results_says_what_to_give(builds, tmp_path, capsys):
    before, now = builds
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "quick").symlink_to(now)
    assert bab_main(["report", "compare", "--profile", "quick", "--reports-dir", str(reports), "--rows",
                     str(before)]) == 0
    out = capsys.readouterr().out
    assert ("| 01_x | synthetic | dense | 1.0 |  | accuracy | 50.0 | 75.0 | +25.00 [+0.00, +75.00] points | yes | yes |"
            in out)
    assert out.strip().endswith("2 of 4 new values lie inside the earlier value's interval")
    assert bab_main(["report", "compare", "--profile", "quick", "--reports-dir", str(reports), "--rows",
                     str(tmp_path / "nothing")]) == 2
    assert "holds no results/*.json: give a built report folder" in capsys.readouterr().err
