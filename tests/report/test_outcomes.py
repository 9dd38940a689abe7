"""Per-example outcomes: recorded with the rows a study builds, saved beside the results, read back by the report,
and used by the claims to pair two rows example by example."""

import json

import numpy as np
import pytest

from bab.core import outcomes
from bab.core.statistics import paired_difference, unpaired_difference
from bab.experiments.text import AG_NEWS_METHODS as AGN
from bab.report import claims as C
from bab.report.pages.index import collect_outcomes, judged_claims
from bab.report.results.contract import RESULTS_CONTRACT, outcomes_path, save_results


def row(method, budget, **values):
    return {"experiment": method.experiment, "method": method.name, "budget": budget, "cost": None,
            "accuracy": None, "speedup": None, **values}


def _agreeing(n=2000, seed=0):
    """Dense outcomes and a method's that agree on all but ~3% of the examples."""
    rng = np.random.default_rng(seed)
    dense = rng.random(n) < 0.85
    method = np.where(rng.random(n) < 0.97, dense, ~dense)
    return dense, method


def test_outcomes_survive_a_write_and_a_read(tmp_path):
    dense, method = _agreeing(37)
    stored = {"a": dense, "b": np.stack([method, dense])}
    back = outcomes.read(outcomes.write(tmp_path / "x.outcomes.npz", stored))
    assert set(back) == {"a", "b"} and all(np.array_equal(back[k], stored[k]) for k in stored)
    assert outcomes.read(tmp_path / "missing.npz") == {}


def test_a_claim_pairs_two_rows_on_their_outcomes(tmp_path):
    dense, method = _agreeing()
    rows = [row(AGN.dense, 1.0, accuracy=100 * dense.mean(), accuracy_n=dense.size),
            row(AGN.warm, 0.5, accuracy=100 * method.mean(), accuracy_n=method.size)]
    stored = {outcomes.outcome_key(rows[0]): dense, outcomes.outcome_key(rows[1]): method}
    paired = C.claim_by_id("baa-agnews-budgeted").judge(rows, C.Evidence(outcomes=stored))
    expected = paired_difference(100.0 * method, 100.0 * dense)
    assert (paired.ours, paired.low, paired.high) == pytest.approx((expected.value, expected.low, expected.high))
    assert "paired" in paired.covers and "unpaired" not in paired.covers
    unpaired = C.claim_by_id("baa-agnews-budgeted").judge(rows, C.Evidence())
    newcombe = unpaired_difference(rows[1]["accuracy"], 2000, rows[0]["accuracy"], 2000)
    assert (unpaired.low, unpaired.high) == pytest.approx((newcombe.low, newcombe.high))
    assert paired.high - paired.low < 0.6 * (unpaired.high - unpaired.low)


def test_rows_of_several_seed_runs_pair_within_each_seed():
    per_seed = {}
    stored = {}
    for seed in (7, 13, 21):
        dense, method = _agreeing(seed=seed)
        seed_rows = [row(AGN.dense, 1.0, accuracy=100 * dense.mean(), seeds=[seed]),
                     row(AGN.warm, 0.5, accuracy=100 * method.mean(), seeds=[seed])]
        stored.update({outcomes.outcome_key(seed_rows[0]): dense, outcomes.outcome_key(seed_rows[1]): method})
        per_seed[str(seed)] = seed_rows
    merged = [row(AGN.dense, 1.0, accuracy=85.0, seeds=[7, 13, 21]), row(AGN.warm, 0.5, accuracy=85.0,
                                                                          seeds=[7, 13, 21])]
    verdict = C.claim_by_id("baa-agnews-budgeted").judge(
        merged, C.Evidence(seed_rows={"02": per_seed}, outcomes=stored))
    assert verdict.covers == "3 seeds x 2,000 test examples, paired"
    differences = [100 * (stored[outcomes.outcome_key(r[1])].mean() - stored[outcomes.outcome_key(r[0])].mean())
                   for r in per_seed.values()]
    assert verdict.ours == pytest.approx(np.mean(differences))


def test_a_study_row_records_its_evaluations_outcomes_and_their_count(tmp_path, monkeypatch):
    from bab.experiments.text import AG_NEWS, TextStudy

    study = TextStudy(AG_NEWS["smoke"], "ag_news_custom", cache=False, progress=False)
    dense, _ = _agreeing(50)
    built = study.result_row(AGN.dense, 1.0, {"cost": 1.0, "accuracy": 100 * dense.mean(), "outcomes": dense},
                             models=())
    assert built["accuracy_n"] == 50 and "outcomes" not in built
    assert np.array_equal(study.ledger.outcomes_for([built])[outcomes.outcome_key(built)], dense)
    # saved beside the results file and read back by the report under the same key
    path = tmp_path / "results" / "02_ag_news_custom.json"
    path.parent.mkdir()
    save_results([built], path, study.ledger)
    assert outcomes_path(path).is_file()
    merged = collect_outcomes(tmp_path)
    assert np.array_equal(merged[outcomes.outcome_key(json.loads(path.read_text())["rows"][0])], dense)
    claims, _ = judged_claims({"02_ag_news_custom": (RESULTS_CONTRACT, [built])}, outcomes=merged)
    assert any(c["id"] == "baa-agnews-budgeted" for c in claims)


def test_a_run_without_outcomes_removes_an_older_runs_file(tmp_path):
    path = tmp_path / "02.json"
    outcomes.write(outcomes_path(path), {"stale": np.ones(3, bool)})
    save_results([row(AGN.dense, 1.0, accuracy=90.0)], path)
    assert not outcomes_path(path).exists()


def test_a_speed_claim_takes_its_interval_from_the_interleaved_repeats():
    rng = np.random.default_rng(2)
    timed = row(AGN.hard_adapted_ours, 0.5, speedup=1.5, analytic_limit=1.6)
    ms = rng.normal(10.0, 0.3, 15)
    stored = {outcomes.outcome_key(timed, "dense_ms"): 1.5 * ms + rng.normal(0, 0.3, 15),
              outcomes.outcome_key(timed, "ms"): ms}
    verdict = C.claim_by_id("baa-agnews-skip-speed").judge([timed], C.Evidence(outcomes=stored))
    assert verdict.low < 1.5 < verdict.high and verdict.covers == "15 interleaved repeats, paired"


def test_a_perplexity_claim_bootstraps_over_the_same_windows():
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    dense = row(GPT2.dense, 1.0, perplexity=20.0)
    pruned = row(GPT2.headline, 0.2, perplexity=20.5, cost=0.2)
    rng = np.random.default_rng(4)
    nll = rng.normal(300.0, 20.0, 40)
    stored = {outcomes.outcome_key(dense, "window_nll"): nll,
              outcomes.outcome_key(pruned, "window_nll"): nll + rng.normal(2.0, 1.0, 40),
              outcomes.outcome_key(pruned, "window_tokens"): np.full(40, 128.0)}
    verdict = C.claim_by_id("dcp-perplexity-gpt2").judge([dense, pruned], C.Evidence(outcomes=stored))
    assert verdict.covers == "40 windows, paired" and verdict.low < verdict.ours < verdict.high
    assert verdict.ours == pytest.approx(np.exp((stored[outcomes.outcome_key(pruned, "window_nll")] - nll).sum()
                                                / (40 * 128)))


def test_learned_against_static_masks_is_judged_part_by_part_over_the_same_windows():
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    rng = np.random.default_rng(5)
    nll = rng.normal(300.0, 20.0, 40)
    tokens = np.full(40, 128.0)
    learned = row(GPT2.specialist, None, perplexity=10.0, cost=0.3, settings={"gamma": 1.0})
    # the masks fine-tuned as the learned model is (the rule compares like with like):
    # local: clearly worse than learned on every window; strided: the same on average, noisy window by window
    local = row(GPT2.static_finetuned, None, perplexity=12.0, settings={"kind": "local", "gamma": 1.0})
    strided = row(GPT2.static_finetuned, None, perplexity=10.0, settings={"kind": "strided", "gamma": 1.0})
    noise = rng.normal(0.0, 30.0, 40)
    stored = {outcomes.outcome_key(learned, "window_nll"): nll,
              outcomes.outcome_key(learned, "window_tokens"): tokens,
              outcomes.outcome_key(local, "window_nll"): nll + 25.0,
              outcomes.outcome_key(strided, "window_nll"): nll + noise - noise.mean()}
    verdict = C.claim_by_id("dcp-beats-static-masks").judge([learned, local, strided], C.Evidence(outcomes=stored))
    # the closest part (strided, a ratio of exactly 1 window-summed) comes first and decides "inconclusive"
    assert verdict.status == "inconclusive" and verdict.covers == "40 windows, paired"
    assert verdict.ours == pytest.approx(1.0) and verdict.low < 1.0 < verdict.high
    assert "strided at gamma=1: inconclusive" in verdict.why and "local at gamma=1: reproduced" in verdict.why
    assert "1 of 2 (mask kind, gamma) parts hold" in verdict.why
    # without the windows a part is a point estimate, judged by its value alone
    bare = C.claim_by_id("dcp-beats-static-masks").judge([learned, local])
    assert bare.status == "reproduced" and bare.ours == pytest.approx(10.0 / 12.0) and "no interval" in bare.covers
    # masks applied to the untouched model are not what the rule compares with: waiting for the fine-tuned ones
    untouched = row(GPT2.static, None, perplexity=50.0, settings={"kind": "local", "gamma": 1.0})
    assert C.claim_by_id("dcp-beats-static-masks").judge([learned, untouched]).status == "not run"


def test_each_step_of_the_sweep_is_judged_by_its_ratio_over_the_same_windows():
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    rng = np.random.default_rng(8)
    nll = rng.normal(300.0, 20.0, 40)
    tokens = np.full(40, 128.0)
    # three specialists: 10% -> 50% pruned costs 10 nats a window (a clear rise); 50% -> 80% is flat, window-noisy
    sweep = [(0.001, 0.9, nll), (0.01, 0.5, nll + 10.0), (0.1, 0.2, nll + 10.0 + rng.normal(0.0, 5.0, 40))]
    rows, stored = [], {}
    for gamma, kept, window_nll in sweep:
        r = row(GPT2.specialist, None, cost=kept, settings={"gamma": gamma},
                perplexity=float(np.exp(window_nll.sum() / tokens.sum())))
        rows.append(r)
        stored[outcomes.outcome_key(r, "window_nll")] = window_nll
        stored[outcomes.outcome_key(r, "window_tokens")] = tokens
    verdict = C.claim_by_id("dcp-perplexity-sparsity").judge(rows, C.Evidence(outcomes=stored))
    flat = np.exp((sweep[2][2] - sweep[1][2]).sum() / tokens.sum())  # by hand: the summed nats per token
    assert verdict.ours == pytest.approx(flat) and verdict.covers == "40 windows, paired"
    assert "10% to 50% pruned: reproduced" in verdict.why and "50% to 80% pruned: inconclusive" in verdict.why
    assert verdict.status == "inconclusive" and verdict.low < 1.0 < verdict.high
    # a step to more pruning that lowers perplexity on every window fails the claim
    stored[outcomes.outcome_key(rows[2], "window_nll")] = nll + 5.0
    rows[2] = {**rows[2], "perplexity": float(np.exp((nll + 5.0).sum() / tokens.sum()))}
    assert C.claim_by_id("dcp-perplexity-sparsity").judge(rows, C.Evidence(outcomes=stored)).status == "partly"


def test_token_kinds_compare_shares_pruned_over_the_same_windows():
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    rng = np.random.default_rng(9)
    pairs = {kind: rng.integers(200, 400, 16).astype(float) for kind in ("punctuation", "stop word", "other")}
    share = {"punctuation": 0.9, "stop word": 0.8, "other": 0.8}  # stop words: no more pruned than other tokens
    pruned = {kind: np.round(pairs[kind] * np.clip(share[kind] + rng.normal(0, 0.05, 16), 0, 1)) for kind in pairs}
    rows, stored = [], {}
    for kind in pairs:
        r = row(GPT2.token_kinds, None, value=100 * pruned[kind].sum() / pairs[kind].sum(),
                settings={"kind": kind, "text": "val"})
        rows.append(r)
        stored[outcomes.outcome_key(r, "window_pruned")] = pruned[kind]
        stored[outcomes.outcome_key(r, "window_pairs")] = pairs[kind]
    verdict = C.claim_by_id("dcp-token-kinds").judge(rows, C.Evidence(outcomes=stored))
    def pruned_share(kind):
        return pruned[kind].sum() / pairs[kind].sum()

    by_hand = 100 * (pruned_share("stop word") - pruned_share("other"))
    assert verdict.ours == pytest.approx(by_hand) and verdict.low < by_hand < verdict.high
    assert verdict.covers == "16 windows, paired" and verdict.status == "inconclusive"
    assert "val: punctuation: reproduced" in verdict.why and "val: stop word: inconclusive" in verdict.why


def test_zero_shot_tasks_pair_item_by_item_when_their_outcomes_are_stored():
    from bab.experiments.pretrained_context import PRETRAINED_METHODS as DECODER

    rng = np.random.default_rng(6)
    rows, stored = [], {}
    for task in ("cloze", "ending"):
        dense = rng.random(300) < 0.55
        pruned = np.where(rng.random(300) < 0.9, dense, ~dense)
        for weights, gamma, kept, items in (("dense fine-tuned", 0.0, 1.0, dense), ("fine-tuned", 3.0, 0.2, pruned)):
            r = row(DECODER.zero_shot, None, cost=kept, accuracy=100 * items.mean(), accuracy_n=300,
                    settings={"task": task, "weights": weights, "gamma": gamma})
            rows.append(r)
            stored[outcomes.outcome_key(r)] = items
    verdict = C.claim_by_id("dcp-zero-shot").judge(rows, C.Evidence(outcomes=stored))
    assert "300 test examples, paired" in verdict.covers
    unpaired = C.claim_by_id("dcp-zero-shot").judge(rows, C.Evidence())
    assert verdict.high - verdict.low < unpaired.high - unpaired.low


def test_a_notebooks_judgement_table_pairs_on_the_outcomes_its_kernel_recorded():
    from bab.experiments.text import AG_NEWS, TextStudy

    study = TextStudy(AG_NEWS["smoke"], "ag_news_custom", cache=False, progress=False)
    dense, method = _agreeing()
    rows = [study.result_row(AGN.dense, 1.0, {"cost": 1.0, "accuracy": 100 * dense.mean(), "outcomes": dense},
                             models=()),
            study.result_row(AGN.warm, 0.5, {"cost": 0.5, "accuracy": 100 * method.mean(), "outcomes": method},
                             models=())]
    table = C.judgement_table(rows, ledger=study.ledger).set_index("where")
    expected = paired_difference(100.0 * method, 100.0 * dense)
    shown = table.loc["Section 6.3, Table 3", "ours [95% interval]"]
    shown = shown.iloc[0] if hasattr(shown, "iloc") else shown
    assert shown == f"{expected.value:.3g} [{expected.low:.3g}, {expected.high:.3g}]"


def test_unit_ids_name_content_not_position():
    inputs = np.arange(24).reshape(6, 4)
    labels = np.array([0, 1, 0, 1, 0, 1])
    ids = outcomes.unit_ids(inputs, labels)
    assert ids.dtype == np.int64 and len(set(ids.tolist())) == 6
    shuffled = np.array([3, 0, 5, 1, 4, 2])
    assert np.array_equal(outcomes.unit_ids(inputs[shuffled], labels[shuffled]), ids[shuffled])
    assert not np.array_equal(outcomes.unit_ids(inputs, 1 - labels), ids)  # the label is part of the example
    texts = ["a cat", "a dog", "a cat"]
    text_ids = outcomes.unit_ids(texts)
    assert text_ids[0] == text_ids[2] != text_ids[1]
    with pytest.raises(ValueError, match="units"):
        outcomes.unit_ids(np.zeros((0, 3)))


def test_align_matches_units_by_id_and_refuses_other_sets():
    ids = np.array([11, 22, 33, 44], dtype=np.int64)
    a = np.array([True, False, True, False])
    order = [2, 0, 3, 1]
    b = np.array([1.0, 2.0, 3.0, 4.0])
    aligned = outcomes.align([a, b[order]], [ids, ids[order]])
    # written out: unit 11 is b's second entry after the shuffle, 22 its fourth, 33 its first, 44 its third
    assert np.array_equal(aligned[0], a) and np.array_equal(aligned[1], b)
    stacked = np.stack([b[order], 10 * b[order]])
    assert np.array_equal(outcomes.align([a, stacked], [ids, ids[order]])[1], np.stack([b, 10 * b]))
    # the units come in the order of their ids whichever array is first
    again = outcomes.align([b[order], a], [ids[order], ids])
    assert np.array_equal(again[0], b) and np.array_equal(again[1], a)
    assert outcomes.align([a, b], [ids, np.array([11, 22, 33, 55])]) is None  # another test set
    assert outcomes.align([a, b[:3]], [ids, ids[:3]]) is None
    assert outcomes.align([a, b], [None, ids]) is not None  # no ids: same length, same order assumed
    assert outcomes.align([a, b[:3]], [None, None]) is None


def test_written_outcomes_share_one_copy_of_equal_arrays(tmp_path):
    ids = np.arange(5000, dtype=np.int64) * 7919
    correct = np.random.default_rng(0).random(5000) < 0.8
    one = outcomes.write(tmp_path / "one.npz", {"a": correct, "a ids": ids})
    many = outcomes.write(tmp_path / "many.npz", {f"{k}{s}": v for k in range(10)
                                                  for s, v in ((" correct", correct), (" ids", ids))})
    assert many.stat().st_size < 1.3 * one.stat().st_size
    back = outcomes.read(many)
    assert len(back) == 20 and np.array_equal(back["7 ids"], ids) and np.array_equal(back["3 correct"], correct)


def test_a_claim_pairs_rows_whose_examples_come_in_another_order():
    dense, method = _agreeing()
    ids = np.arange(dense.size, dtype=np.int64) + 1000
    order = np.random.default_rng(1).permutation(dense.size)
    rows = [row(AGN.dense, 1.0, accuracy=100 * dense.mean(), accuracy_n=dense.size),
            row(AGN.warm, 0.5, accuracy=100 * method.mean(), accuracy_n=method.size)]
    stored = {outcomes.outcome_key(rows[0]): dense, outcomes.outcome_key(rows[0], "unit_ids"): ids,
              outcomes.outcome_key(rows[1]): method[order], outcomes.outcome_key(rows[1], "unit_ids"): ids[order]}
    verdict = C.claim_by_id("baa-agnews-budgeted").judge(rows, C.Evidence(outcomes=stored))
    expected = paired_difference(100.0 * method, 100.0 * dense)
    assert (verdict.low, verdict.high) == pytest.approx((expected.low, expected.high))
    stored[outcomes.outcome_key(rows[1], "unit_ids")] = ids[order] + 1  # scored on other examples: no pairing
    unpaired = C.claim_by_id("baa-agnews-budgeted").judge(rows, C.Evidence(outcomes=stored))
    assert "unpaired" in unpaired.covers


def _two_seed_perplexity_runs(rng, ids_order=None):
    """Dense and pruned rows of two seed runs on the same 40 windows (different models at each seed), their stored
    per-window outcomes, and the merged rows the report judges."""
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2
    from bab.report.results.seeds import average_seed_rows

    tokens = rng.integers(100, 160, 40).astype(float)
    ids = rng.permutation(40).astype(np.int64) * 7919  # unsorted ids: pairing must follow them, not positions
    per_seed, stored = {}, {}
    for seed, cost in ((7, 2.0), (13, 6.0)):
        dense_nll = rng.normal(300.0, 20.0, 40)
        pruned_nll = dense_nll + rng.normal(cost, 1.0, 40)
        seed_ids = ids if ids_order is None or seed == 7 else ids[ids_order]
        rows = []
        for method, budget, nll in ((GPT2.dense, 1.0, dense_nll), (GPT2.headline, 0.2, pruned_nll)):
            r = row(method, budget, cost=budget, seeds=[seed], runs=[f"{method.name}-{seed}"], speedup=2.0,
                    analytic_limit=3.0, perplexity=float(np.exp(nll.sum() / tokens.sum())))
            stored.update({outcomes.outcome_key(r, "window_nll"): nll, outcomes.outcome_key(r, "window_tokens"): tokens,
                           outcomes.outcome_key(r, "unit_ids"): seed_ids,
                           outcomes.outcome_key(r, "dense_ms"): 4.0 + rng.normal(0, 0.1, 15),
                           outcomes.outcome_key(r, "ms"): 2.0 + rng.normal(0, 0.1, 15)})
            rows.append(r)
        per_seed[seed] = rows
    return per_seed, stored, average_seed_rows(per_seed)


def test_rows_averaging_two_seed_runs_take_their_perplexity_interval_over_seeds_and_windows():
    per_seed, stored, merged = _two_seed_perplexity_runs(np.random.default_rng(12))
    verdict = C.claim_by_id("dcp-perplexity-gpt2").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    # by hand: the merged rows' perplexities are each seed's mean, and the ratio is theirs
    by_hand = (np.mean([s[1]["perplexity"] for s in per_seed.values()])
               / np.mean([s[0]["perplexity"] for s in per_seed.values()]))
    assert verdict.ours == pytest.approx(by_hand) and verdict.covers == "2 seeds x 40 windows, paired"
    assert verdict.low < by_hand < verdict.high
    speed = C.claim_by_id("dcp-throughput").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    assert speed.covers == "2 seeds x 15 interleaved repeats, paired within each seed"


def test_seeds_timed_a_different_number_of_times_still_give_a_speed_up_interval():
    # adaptive repeats stop when a speed-up is known well enough, so one seed's model may be timed 10 times, another 15
    per_seed, stored, merged = _two_seed_perplexity_runs(np.random.default_rng(12))
    for kind in ("dense_ms", "ms"):
        key = outcomes.outcome_key(per_seed[13][1], kind)
        stored[key] = stored[key][:10]
    speed = C.claim_by_id("dcp-throughput").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    assert speed.covers == "2 seeds x 10 to 15 interleaved repeats, paired within each seed"
    assert speed.low < speed.high


def test_a_seed_run_without_its_windows_gives_a_point_estimate_that_says_so():
    per_seed, stored, merged = _two_seed_perplexity_runs(np.random.default_rng(12))
    del stored[outcomes.outcome_key(per_seed[13][1], "window_nll")]
    verdict = C.claim_by_id("dcp-perplexity-gpt2").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    assert verdict.low == verdict.high == verdict.ours
    assert verdict.covers == "point estimate: per-window log-likelihoods are not stored for every row and seed, so " \
                             "no interval"


def test_seed_runs_scored_on_windows_in_another_order_are_not_paired_by_position():
    order = np.roll(np.arange(40), 1)
    per_seed, stored, merged = _two_seed_perplexity_runs(np.random.default_rng(12), ids_order=order)
    verdict = C.claim_by_id("dcp-perplexity-gpt2").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    assert verdict.low == verdict.high
    assert verdict.covers == "point estimate: per-window log-likelihoods are kept but not on the same units and " \
                             "seeds, so no interval"
    # timing repeats are each seed's own whatever units it was scored on: they still give an interval
    speed = C.claim_by_id("dcp-throughput").judge(merged, C.Evidence({"06": per_seed}, outcomes=stored))
    assert speed.covers == "2 seeds x 15 interleaved repeats, paired within each seed" and speed.low < speed.high


def test_token_counts_follow_the_windows_when_pairing_reorders_them():
    from bab.core.statistics import perplexity_ratio
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    rng = np.random.default_rng(13)
    tokens = rng.integers(20, 400, 30).astype(float)  # windows of very different lengths
    nll = tokens * rng.normal(3.0, 0.3, 30)
    ids = rng.permutation(30).astype(np.int64)
    dense, pruned = row(GPT2.dense, 1.0, perplexity=1.0), row(GPT2.headline, 0.2, perplexity=1.1, cost=0.2)
    stored = {outcomes.outcome_key(dense, "window_nll"): nll, outcomes.outcome_key(dense, "unit_ids"): ids,
              outcomes.outcome_key(pruned, "window_nll"): nll * 1.1, outcomes.outcome_key(pruned, "unit_ids"): ids,
              outcomes.outcome_key(pruned, "window_tokens"): tokens}
    verdict = C.claim_by_id("dcp-perplexity-gpt2").judge([dense, pruned], C.Evidence(outcomes=stored))
    order = np.argsort(ids)  # by hand: every array in the order of its windows' ids
    expected = perplexity_ratio(nll[order] * 1.1, nll[order], tokens[order])
    assert (verdict.ours, verdict.low, verdict.high) == pytest.approx((expected.value, expected.low, expected.high))


def _zero_shot_seed_runs(budget_seeds=(7, 21), n=40):
    """A decoder notebook's zero-shot rows at three seeds: the dense fine-tune at every seed, and the
    budget-conditioned model at b=0.2 only at ``budget_seeds`` (each seed calibrates its own budget; the others
    land at b=0.1), each row with its per-item outcomes on the same 40 items."""
    from bab.experiments.pretrained_context import PRETRAINED_METHODS as DECODER

    rng = np.random.default_rng(1)
    per_seed, stored = {}, {}
    ids = np.arange(n, dtype=np.int64)
    for seed in (7, 13, 21):
        dense = rng.random(n) < 0.6
        budgeted = np.where(rng.random(n) < 0.7, dense, False)  # loses some items the dense model got
        b = 0.2 if seed in budget_seeds else 0.1
        rows = [row(DECODER.zero_shot, None, cost=1.0, accuracy=100 * dense.mean(), accuracy_n=n, seeds=[seed],
                    runs=[f"dense-{seed}"], settings={"task": "cloze", "weights": "dense fine-tuned", "gamma": 0.0}),
                row(DECODER.zero_shot_budgeted, b, cost=b, accuracy=100 * budgeted.mean(), accuracy_n=n,
                    seeds=[seed], runs=[f"budgeted-{seed}"], settings={"task": "cloze"})]
        for r, correct in zip(rows, (dense, budgeted), strict=True):
            stored[outcomes.outcome_key(r)] = correct
            stored[outcomes.outcome_key(r, "unit_ids")] = ids
        per_seed[seed] = rows
    return per_seed, stored


def test_a_zero_shot_row_of_fewer_seeds_than_its_reference_pairs_on_the_seeds_they_share():
    from bab.report.results.seeds import average_seed_rows

    per_seed, stored = _zero_shot_seed_runs()
    merged = average_seed_rows(per_seed)  # averaged rows drop accuracy_n: their items are each seed's
    assert all("accuracy_n" not in r for r in merged if len(r["seeds"]) > 1)
    evidence = C.Evidence(seed_rows={"07": per_seed}, outcomes=stored)
    budgeted = next(r for r in merged if r["budget"] == 0.2)
    dense = next(r for r in merged if r["method"] == "zero-shot task accuracy")
    assert budgeted["seeds"] == [7, 21] and dense["seeds"] == [7, 13, 21]
    interval = evidence.row_difference(budgeted, dense)
    # by hand: each shared seed's budgeted model against that seed's dense fine-tune, on that seed's items
    by_hand = np.mean([100 * (stored[outcomes.outcome_key(per_seed[s][1])].astype(float)
                              - stored[outcomes.outcome_key(per_seed[s][0])]).mean() for s in (7, 21)])
    assert interval.value == pytest.approx(by_hand) and interval.low < by_hand < interval.high
    assert interval.covers == "2 seeds x 40 test examples, paired"
    judged = {j.claim.id: j for j in C.judge_all(merged, evidence=evidence)}
    verdict = judged["dcp-zero-shot-budget-conditioned"]
    assert verdict.verdict.ours == pytest.approx(by_hand) and verdict.seeds == 2 and verdict.indicative


def test_a_zero_shot_row_without_outcomes_or_item_count_gets_a_point_estimate_not_an_error():
    per_seed, _ = _zero_shot_seed_runs(budget_seeds=(7, 13, 21))
    from bab.report.results.seeds import average_seed_rows

    merged = average_seed_rows(per_seed)
    verdict = C.claim_by_id("dcp-zero-shot-budget-conditioned").judge(merged, C.Evidence(seed_rows={"07": per_seed}))
    assert verdict.low == verdict.ours == verdict.high and "outcomes are not stored" in verdict.covers
    # one model each, counted items: the unpaired interval from the two accuracies
    single = per_seed[7]
    verdict = C.claim_by_id("dcp-zero-shot-budget-conditioned").judge(single, C.Evidence())
    newcombe = unpaired_difference(single[1]["accuracy"], 40, single[0]["accuracy"], 40)
    assert (verdict.low, verdict.high) == pytest.approx((newcombe.low, newcombe.high))
