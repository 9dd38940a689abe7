"""The rules every claim is judged by, each on hand-built rows on either side of it: ceilings and fixed counts not
informative, regions narrower than their interval not testable, fewer than three seeds indicative, the deciding
part shown, and a notebook page judging as the front page does."""

import html

import pytest

from bab.core.statistics import Interval
from bab.experiments.context_pruning import GPT2_METHODS as GPT2
from bab.experiments.synthetic import SYNTHETIC_METHODS as SYN
from bab.experiments.text import AG_NEWS_METHODS as AGN
from bab.experiments.vit import VIT_METHODS as VIT
from bab.report import claims as C
from bab.report.claims.counts import claims_summary
from bab.report.claims.verdicts import Region, Verdict, _combine, _from_parts


def row(method, budget, **values):
    return {"experiment": method.experiment, "method": method.name, "budget": budget, "cost": None,
            "accuracy": None, "speedup": None, **values}


def _synthetic_low_budget(static_accuracy, n=20000):
    return [row(SYN.dense, 1.0, accuracy=100.0, accuracy_n=n), row(SYN.warm, 0.25, accuracy=100.0, cost=0.26,
                                                                   accuracy_n=n),
            row(SYN.static, 0.25, accuracy=static_accuracy, accuracy_n=n)]


def test_a_ceiling_makes_the_low_budget_claim_not_informative_and_a_failing_baseline_lets_it_hold():
    claim = C.claim_by_id("baa-synthetic-low-budget")
    # the static specialist also keeps 100%: the task cannot tell the budgeted model from it
    ceiling = claim.judge(_synthetic_low_budget(100.0), C.Evidence())
    assert ceiling.status == "not informative" and "warm-start static @0.25 gives" in ceiling.why
    # the static specialist falls to 90%: the budgeted model's 100% now says something
    assert claim.judge(_synthetic_low_budget(90.0), C.Evidence()).status == "reproduced"


def test_a_count_fixed_by_the_setting_is_not_informative():
    rows = [row(VIT.sparsifiner, 0.1, cost=0.30)]
    verdict = C.claim_by_id("sparsifiner-flops").judge(rows)
    assert verdict.status == "not informative" and "checks our FLOP counter, not the method" in verdict.why
    assert verdict.ours == pytest.approx(0.30) and verdict.low == verdict.high == pytest.approx(0.30)


@pytest.mark.parametrize("interval, status", [
    (Interval(-1.1, -1.15, -1.05, ""), "reproduced"),  # inside
    (Interval(-1.05, -1.12, -0.98, ""), "inconclusive"),  # straddles, narrower than the region
    (Interval(-1.1, -1.3, -0.9, ""), "not testable"),  # 0.4 wide against a region 0.2 wide
    (Interval(-0.5, -0.8, -0.2, ""), "not reproduced"),  # outside, however wide
])
def test_a_region_narrower_than_the_interval_is_not_testable(interval, status):
    region = Region(low=-1.2, high=-1.0, reason="the paper's -1.1, to 0.1")
    assert region.decide(interval) == status
    if status == "not testable":
        why = C.judged(region, interval, -1.1, "x").why
        assert "no result on these test examples could lie inside it" in why and "4.0x as many" in why


def test_a_one_sided_region_is_never_not_testable():
    assert Region(low=-0.1, reason="").decide(Interval(0.0, -5.0, 5.0, "")) == "inconclusive"


def _agnews(seeds):
    return [row(AGN.warm, 0.5, accuracy=90.0, accuracy_n=2000, seeds=seeds),
            row(AGN.dense, 1.0, accuracy=84.1, accuracy_n=2000, seeds=seeds)]


@pytest.mark.parametrize("seeds, indicative", [([7], True), ([7, 13], True), ([7, 13, 21], False)])
def test_a_deciding_verdict_from_fewer_than_three_seeds_is_indicative_and_counted_apart(seeds, indicative):
    [judged] = C.judge_all(_agnews(seeds), [C.claim_by_id("baa-agnews-budgeted")])
    assert judged.verdict.status == "reproduced" and judged.seeds == len(seeds)
    assert judged.indicative is indicative
    counts = claims_summary([judged.as_dict()])["budgeted attention"]["paper"]
    assert counts["reproduced, indicative" if indicative else "reproduced"] == 1
    assert sum(counts.values()) == 1


def test_a_verdict_that_decides_nothing_is_never_indicative():
    [judged] = C.judge_all([], [C.claim_by_id("baa-agnews-budgeted")])
    assert judged.verdict.status == "not run" and not judged.indicative


def test_a_claim_with_parts_shows_the_number_of_the_part_that_decides_it():
    holds = Verdict("reproduced", 1.0, None, "a", 0.5, 1.5)
    fails = Verdict("not reproduced", -3.0, None, "b", -4.0, -2.0)
    straddles = Verdict("inconclusive", 0.1, None, "c", -0.5, 0.7)
    partly = _from_parts([("first", holds), ("second", fails)])
    assert (partly.status, partly.ours, partly.decided_by) == ("partly", -3.0, "second")
    unsure = _from_parts([("first", holds), ("second", straddles)])
    assert (unsure.status, unsure.ours, unsure.decided_by) == ("inconclusive", 0.1, "second")
    assert _from_parts([("first", holds), ("second", holds)]).decided_by == "first"
    waiting = _from_parts([("first", holds), ("second", Verdict("not run", None, None, "no row"))])
    assert (waiting.status, waiting.ours, waiting.decided_by) == ("not run", None, "second")


@pytest.mark.parametrize("statuses, combined", [
    (("reproduced", "not informative"), "not informative"),
    (("not reproduced", "not informative"), "not reproduced"),
    (("reproduced", "not testable"), "not testable"),
    (("inconclusive", "not testable"), "inconclusive"),
    (("reproduced", "not run"), "not run"),
    (("reproduced", "partly", "reproduced"), "partly"),
])
def test_parts_combine_by_the_weakest_that_decides(statuses, combined):
    assert _combine([Verdict(s, None, None, "") for s in statuses]) == combined


@pytest.mark.parametrize("measured, status", [(2.00, "reproduced"), (1.95, "not reproduced")])
def test_the_throughput_claim_is_judged_with_every_speed_claims_rounding(measured, status):
    # up to 2x, analytic limit 1.97x: the region is >= 1.96, not >= 1.47 (a 0.5 margin)
    rows = [row(GPT2.headline, 0.2, cost=0.2, speedup=measured, analytic_limit=1.97)]
    verdict = C.claim_by_id("dcp-throughput").judge(rows)
    assert verdict.status == status and verdict.region == ">= 1.96"


def test_a_notebook_page_and_the_front_page_judge_the_same_rows_alike():
    rows = _agnews([7, 13]) + [row(AGN.hard_adapted, 0.5, accuracy=80.0, accuracy_n=2000, seeds=[7, 13])]
    evidence = C.Evidence()
    front = {j.claim.statement: j.as_dict() for j in C.judge_all(rows, evidence=evidence)}
    table = C.judgement_table(rows, evidence)
    assert len(table) > 0
    for _, shown in table.iterrows():
        judged = front[shown["claim"]]
        assert shown["verdict"] == (f"{judged['verdict']}, indicative" if judged["indicative"] else judged["verdict"])
        assert shown["seeds"] == judged["seeds"]


def test_the_judgement_table_shows_every_claims_text_whole():
    table = C.judgement_table(_agnews([7, 13, 21]), C.Evidence())
    shown = html.unescape(table._repr_html_())
    longest = max(table["why"], key=len)
    assert len(longest) > 50 and longest in shown and max(table["claim"], key=len) in shown


def _gamma_rows(costs):
    return [row(GPT2.specialist, None, cost=cost, settings={"gamma": gamma})
            for gamma, cost in zip((0.01, 0.03, 0.1), costs, strict=True)]


@pytest.mark.parametrize("costs, status", [((0.6, 0.4, 0.2), "reproduced"), ((0.6, 0.4, 0.45), "not reproduced"),
                                           ((0.6, 0.6, 0.6), "not reproduced")])
def test_a_larger_gamma_must_keep_less_of_the_context(costs, status):
    verdict = C.claim_by_id("dcp-sparsity-controls-strength").judge(_gamma_rows(costs))
    assert verdict.status == status


def test_the_gamma_steps_are_judged_over_the_seeds():
    seeds = {"06_gpt2_context_pruning": {7: _gamma_rows((0.6, 0.4, 0.2)), 13: _gamma_rows((0.6, 0.5, 0.3)),
                                         21: _gamma_rows((0.5, 0.45, 0.35))}}
    merged = _gamma_rows((0.5667, 0.45, 0.2833))
    verdict = C.claim_by_id("dcp-sparsity-controls-strength").judge(merged, C.Evidence(seeds))
    assert verdict.status == "reproduced" and "3 seeds" in verdict.covers
    # the closest step first: 0.1 to 0.3 at seed 21 is -0.05 only
    assert verdict.low <= -0.05 <= verdict.high


def _costs(static, budgeted):
    return [row(SYN.static, 0.25, cost=static), row(SYN.warm, 0.25, cost=budgeted),
            row(SYN.static, 0.5, cost=0.48), row(SYN.warm, 0.5, cost=0.50)]


def test_a_count_over_seeds_carries_their_spread():
    # budgeted cheaper at b = 0.25 on average, but one seed of three the other way: the seeds decide nothing
    seeds = {"01_synthetic": {7: _costs(0.36, 0.30), 13: _costs(0.35, 0.31), 21: _costs(0.30, 0.33)}}
    merged = _costs(0.3367, 0.3133)
    claim = C.claim_by_id("baa-budgeted-low-static-mid")
    low = dict(claim.parts)["b = 0.25, budgeted cheaper"]
    verdict = low.judge(merged, C.Evidence(seeds))
    assert verdict.status == "inconclusive" and verdict.low < 0 < verdict.high and "3 seeds" in verdict.covers
    # one model: the count is exact
    assert low.judge(_costs(0.36, 0.30)).status == "reproduced"
    # every seed cheaper: reproduced over the seeds too
    steady = {"01_synthetic": {7: _costs(0.36, 0.30), 13: _costs(0.35, 0.31), 21: _costs(0.37, 0.30)}}
    assert low.judge(_costs(0.36, 0.303), C.Evidence(steady)).status == "reproduced"
    # the whole claim: static cheaper at b = 0.5 (0.48 against 0.50) holds as well
    assert claim.judge(_costs(0.36, 0.30)).status == "reproduced"


def _sweep(method, costs):
    return [row(method, b, cost=c, accuracy=90.0) for b, c in zip((0.1, 0.5, 1.0), costs, strict=True)]


def test_the_cost_must_not_fall_as_the_budget_rises_in_every_sweep():
    from bab.experiments.bert import BERT_AG_NEWS_METHODS as BERT
    from bab.experiments.bert import BERT_DBPEDIA_METHODS as DBPEDIA

    claim = C.claim_by_id("baa-cost-monotone")
    rising = (_sweep(SYN.sweep, (0.15, 0.5, 1.0)) + _sweep(BERT.soft_sweep, (0.1, 0.5, 1.0))
              + _sweep(DBPEDIA.soft_sweep, (0.1, 0.5, 1.0)))
    assert claim.judge(rising).status == "reproduced"
    dip = rising[:3] + _sweep(BERT.soft_sweep, (0.1, 0.6, 0.55)) + rising[6:]
    verdict = claim.judge(dip)
    assert verdict.status == "partly" and verdict.decided_by == "AG News" and verdict.ours == pytest.approx(-0.05)
    assert claim.judge(rising[3:]).status == "not run"  # the synthetic sweep's rows are missing
