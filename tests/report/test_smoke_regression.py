"""The smoke regression check: the rows the notebooks wrote in this session (nbval, under ./run_all.sh test)
against tests/reference/smoke_rows.json; and the comparison itself on rows built by hand."""

import json
import os
from pathlib import Path

import pytest

from bab.report.regression import TOLERANCES, compare_rows, metric_count, read_reference
from bab.report.results import ROWS_DIR_ENV

BASE = {"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.5, "accuracy": 97.0,
        "speedup": None}


def test_differences_beyond_the_tolerances_are_reported_and_within_them_are_not():
    assert compare_rows([{**BASE, "accuracy": 98.9, "cost": 0.515, "speedup": 3.0}], [BASE]) == []
    problems = compare_rows([{**BASE, "accuracy": 99.5}], [BASE])
    assert problems == ["('synthetic', 'warm-start budgeted', 0.5, ''): accuracy 99.5 vs reference 97.0 "
                        "(tolerance 2)"]
    assert compare_rows([{**BASE, "cost": 0.53}], [BASE])[0].endswith("cost 0.53 vs reference 0.5 (tolerance 0.02)")
    lm = {**BASE, "experiment": "gpt2_context_pruning", "method": "dense", "budget": 1.0, "perplexity": 20.0}
    assert compare_rows([{**lm, "perplexity": 20.9}], [lm]) == []
    assert "perplexity 21.1 vs reference 20.0 (tolerance 5%)" in compare_rows([{**lm, "perplexity": 21.1}], [lm])[0]
    assert compare_rows([{**BASE, "accuracy": None}], [BASE])  # a number that vanished is a difference
    other = {**BASE, "budget": 0.25}
    assert compare_rows([BASE], [BASE, other]) == ["missing row ('synthetic', 'warm-start budgeted', 0.25, '')"]
    assert compare_rows([BASE, other], [BASE]) == ["row not in the reference ('synthetic', 'warm-start budgeted', "
                                                   "0.25, '')"]
    assert set(TOLERANCES) >= {"accuracy", "cost", "perplexity"}


def test_a_methods_value_and_the_seed_spread_are_guarded_too():
    spearman = {**BASE, "experiment": "bert_ag_news", "method": "gate ranking", "budget": None, "value": 0.9}
    assert compare_rows([{**spearman, "value": 0.94}], [spearman]) == []  # below 1: within 0.05 of it
    assert compare_rows([{**spearman, "value": 0.96}], [spearman])[0].endswith("value 0.96 vs reference 0.9 "
                                                                                 "(tolerance 5%)")
    share = {**spearman, "method": "compute, structural", "budget": 0.5, "value": 40.0}
    assert compare_rows([{**share, "value": 41.9}], [share]) == []  # 5% of 40 is 2
    assert compare_rows([{**share, "value": 42.1}], [share])
    spread = {**BASE, "accuracy_std": 1.0}
    assert compare_rows([{**spread, "accuracy_std": 2.9}], [spread]) == []
    assert compare_rows([{**spread, "accuracy_std": 3.1}], [spread])


def test_the_reference_covers_every_notebook_and_guards_many_numbers():
    reference = read_reference()
    experiments = {row["experiment"] for rows in reference.values() for row in rows}
    assert {"synthetic", "ag_news_custom", "bert_ag_news", "bert_dbpedia14", "vit_sparsifiner",
            "gpt2_context_pruning", "pretrained_context_pruning"} <= experiments
    assert metric_count(reference) > 100


@pytest.mark.after_notebooks
def test_smoke_rows_written_in_this_session_match_the_reference():
    folder = os.environ.get(ROWS_DIR_ENV)
    if not folder:
        pytest.skip(f"${ROWS_DIR_ENV} is not set: ./run_all.sh test sets it for nbval's notebooks")
    written = {p.stem: json.loads(p.read_text())["rows"] for p in sorted(Path(folder).glob("*.json"))}
    if not written:
        pytest.skip("no notebook wrote rows in this session (nbval did not run the notebooks)")
    reference = read_reference()
    problems = [f"{name}: no reference rows (run `python -m bab notebooks refresh`)"
                for name in written if name not in reference]
    for name, rows in written.items():
        problems += [f"{name}: {p}" for p in compare_rows(rows, reference.get(name, rows))]
    assert not problems, "smoke rows moved beyond their tolerances:\n" + "\n".join(problems)
