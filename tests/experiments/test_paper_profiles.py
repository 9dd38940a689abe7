import math

import pytest

from bab.experiments.profiles import EXPERIMENTS, PROFILE_NAMES, get_profile, profiles_of
from bab.report.results.paper import PAPER_RESULTS, check_paper_rows, comparison_table


def test_paper_rows_name_declared_methods_with_fitting_budgets_and_unique_keys():
    check_paper_rows()
    bad_budget = [{**PAPER_RESULTS[0], "budget": 0.5}]  # the synthetic dense row at 0.5
    with pytest.raises(ValueError, match="dense reference: its budget is 1.0"):
        check_paper_rows(bad_budget)
    with pytest.raises(ValueError, match="declares no method 'warm start budgeted'"):
        check_paper_rows([{**PAPER_RESULTS[2], "method": "warm start budgeted"}])
    with pytest.raises(ValueError, match="repeats"):
        check_paper_rows(PAPER_RESULTS[:2] + PAPER_RESULTS[:1])


def test_paper_headline_numbers_are_recorded():
    find = {(r["experiment"], r["method"], r["budget"]): r for r in PAPER_RESULTS}
    assert find[("synthetic", "warm-start budgeted", 0.25)]["cost"] == 0.303
    assert find[("synthetic", "dense", 1.0)]["accuracy"] == 99.4
    assert find[("ag_news_custom", "budgeted hard skip, adapted", 0.5)]["speedup"] == 1.28


def test_comparison_table_joins_ours_to_the_papers_and_keeps_gaps():
    ours = [{"experiment": "synthetic", "method": "dense", "budget": 1.0, "cost": 1.0, "accuracy": 99.0,
             "speedup": None},
            {"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.45,
             "accuracy": 98.0, "speedup": None},
            {"experiment": "synthetic", "method": "something new", "budget": 0.3, "cost": 0.3,
             "accuracy": 90.0, "speedup": None}]
    table = comparison_table(ours)
    assert set(table.experiment) == {"synthetic"}  # other experiments are not dragged in
    row = table[(table.method == "warm-start budgeted") & (table.budget == 0.5)].iloc[0]
    assert row["accuracy (paper)"] == 100.0 and row["accuracy (ours)"] == 98.0
    # each side against its own dense model: the paper 100.0 - 99.4, ours 98.0 - 99.0
    assert row["vs dense (paper)"] == pytest.approx(0.6) and row["vs dense (ours)"] == pytest.approx(-1.0)
    assert "accuracy gap" not in table and "settings" not in table  # no level-vs-level column; no settings here
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
        assert paper.hard_adapt.adaptation.freeze_gates and paper.recovery.adaptation.kd_temperature == 2.0
        assert paper.timing_len == 128
