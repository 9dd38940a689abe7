import math

import pytest

from bab.experiments.profiles import EXPERIMENTS, PROFILE_NAMES, get_profile, profiles_of
from bab.report.paper import PAPER_RESULTS, comparison_table
from bab.report.results import validate_rows


def test_paper_rows_are_valid_result_rows_and_unique():
    validate_rows([{k: v for k, v in row.items() if k != "note" or v} for row in PAPER_RESULTS])
    keys = [(r["experiment"], r["method"], r["budget"]) for r in PAPER_RESULTS]
    assert len(keys) == len(set(keys))


def test_paper_headline_numbers_are_recorded():
    find = {(r["experiment"], r["method"], r["budget"]): r for r in PAPER_RESULTS}
    assert find[("synthetic", "warm-start budgeted", 0.25)]["cost"] == 0.303
    assert find[("synthetic", "dense", 1.0)]["accuracy"] == 99.4
    assert find[("ag_news_custom", "budgeted hard skip, adapted", 0.5)]["speedup"] == 1.28


def test_comparison_table_joins_ours_to_the_papers_and_keeps_gaps():
    ours = [{"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.45,
             "accuracy": 98.0, "speedup": None},
            {"experiment": "synthetic", "method": "something new", "budget": 0.3, "cost": 0.3,
             "accuracy": 90.0, "speedup": None}]
    table = comparison_table(ours)
    assert set(table.experiment) == {"synthetic"}  # other experiments are not dragged in
    row = table[(table.method == "warm-start budgeted") & (table.budget == 0.5)].iloc[0]
    assert row["accuracy (paper)"] == 100.0 and row["accuracy (ours)"] == 98.0
    assert row["accuracy gap"] == pytest.approx(-2.0)
    # a paper row we did not reproduce stays visible, with no number of ours
    missing = table[(table.method == "warm-start static") & (table.budget == 0.25)].iloc[0]
    assert math.isnan(missing["accuracy (ours)"])
    assert "something new" in set(table.method)


def test_every_experiment_has_every_profile():
    for experiment in EXPERIMENTS:
        profiles = profiles_of(experiment)
        assert set(profiles) == set(PROFILE_NAMES), experiment


def test_paper_profile_follows_the_published_synthetic_protocol():
    paper = get_profile("synthetic", "paper")
    assert (paper.data.num_train, paper.data.num_val, paper.data.seq_len) == (8192, 2048, 64)
    assert paper.dense.epochs == 32
    assert len(paper.data_seeds) * len(paper.opt_seeds) == 9


def test_unknown_profile_or_experiment_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        get_profile("synthetic", "fast")
    with pytest.raises(ValueError, match="unknown experiment"):
        get_profile("imagenet", "quick")


def test_our_bert_rows_sit_beside_the_papers_bert_mini_rows():
    ours = [{"experiment": "bert_ag_news", "method": "dense", "budget": 1.0, "cost": 1.0, "accuracy": 85.0,
             "speedup": None, "note": "model: MiniLM"}]
    table = comparison_table(ours)
    row = table[(table.experiment == "bert_mini_ag_news") & (table.method == "dense")].iloc[0]
    assert row["accuracy (paper)"] == 87.2 and row["accuracy (ours)"] == 85.0
    assert row["note (ours)"] == "model: MiniLM"


def test_bert_profiles_follow_the_papers_protocol_at_paper():
    for experiment in ("bert_ag_news", "bert_dbpedia14"):
        paper = get_profile(experiment, "paper")
        assert (paper.num_train, paper.num_val, paper.num_test, paper.max_len) == (2000, 1000, 1000, 128)
        assert paper.hard_adapt.freeze_gates and paper.recovery.kd_temperature == 2.0
        assert paper.timing_len == 128
