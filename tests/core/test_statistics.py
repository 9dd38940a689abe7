"""Intervals checked against hand-computed cases, textbook formulas written out here, and brute-force loops."""

import math

import numpy as np
import pytest

from bab.core import statistics
from bab.core.statistics import Interval


def test_wilson_interval_matches_the_closed_form():
    # Wilson (1927): centre (p + z^2/2n) / (1 + z^2/n), half-width z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
    z, correct, n = statistics.Z, 873, 1000
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert statistics.proportion_interval(correct, n) == pytest.approx((centre - half, centre + half))


def test_an_accuracy_at_the_ceiling_still_has_an_interval_below_it():
    interval = statistics.accuracy_interval(100.0, 2048)
    assert interval.high == 100.0 and 99.7 < interval.low < 100.0  # Wilson at 2048/2048: 1 - 3.84 / 2051.8


@pytest.mark.parametrize("correct, n", [(-1, 10), (11, 10), (0, 0)])
def test_impossible_counts_are_refused(correct, n):
    with pytest.raises(ValueError, match="0 <= correct <= n"):
        statistics.proportion_interval(correct, n)


def test_a_paired_difference_matches_a_bootstrap_loop_written_out():
    rng = np.random.default_rng(3)
    dense = rng.random(800) < 0.9
    method = np.where(rng.random(800) < 0.95, dense, ~dense)  # agrees with dense on ~95% of examples
    d = (method.astype(float) - dense.astype(float)) * 100
    means = [d[rng.integers(0, d.size, d.size)].mean() for _ in range(4000)]
    low, high = np.quantile(means, [0.025, 0.975])
    interval = statistics.paired_difference(method * 100.0, dense * 100.0)
    assert interval.value == pytest.approx(d.mean())
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=0.25)
    assert "1 training seed" in interval.covers and "paired" in interval.covers


def test_pairing_narrows_the_interval_of_two_models_that_mostly_agree():
    rng = np.random.default_rng(5)
    dense = rng.random(2000) < 0.88
    method = np.where(rng.random(2000) < 0.97, dense, ~dense)
    paired = statistics.paired_difference(method * 100.0, dense * 100.0)
    unpaired = statistics.unpaired_difference(100 * method.mean(), 2000, 100 * dense.mean(), 2000)
    assert paired.high - paired.low < 0.6 * (unpaired.high - unpaired.low)


def test_identical_outcomes_give_a_degenerate_interval():
    same = np.array([1.0, 0.0, 1.0, 1.0])
    interval = statistics.paired_difference(same, same)
    assert (interval.value, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_resampling_seeds_carries_their_spread():
    rng = np.random.default_rng(0)
    base = rng.random((3, 1000)) < 0.9
    same_shift = statistics.paired_difference(base * 100.0, base * 100.0 - 1.0)  # every seed +1 point
    assert same_shift.low == same_shift.high == pytest.approx(1.0)
    flipped = base.copy()
    flipped[0, :50] = ~flipped[0, :50]  # one seed differs on 50 examples, the others not at all
    spread = statistics.paired_difference(flipped * 100.0, base * 100.0)
    assert "3 seeds x 1,000 test examples, paired" in spread.covers
    assert spread.low <= spread.value <= spread.high and spread.high - spread.low > 0


def test_outcomes_that_do_not_pair_are_refused():
    with pytest.raises(ValueError, match="pair example for example"):
        statistics.paired_difference(np.ones(10), np.ones(11))


def test_seed_differences_without_sampling_error_is_a_bootstrap_over_seeds():
    interval = statistics.seed_differences([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], 500)
    assert (interval.low, interval.high) == (1.0, 1.0)
    one = statistics.seed_differences([2.0], [0.5], 500)  # one seed: normal, +- 1.96 x 0.5
    assert (one.low, one.high) == pytest.approx((2.0 - 0.98, 2.0 + 0.98), abs=0.06)
    assert "1 training seed" in one.covers


def test_a_speed_ratio_interval_resamples_the_interleaved_repeats_together():
    rng = np.random.default_rng(1)
    pruned = rng.normal(10.0, 0.2, 21)
    exact = statistics.ratio_of_medians(2 * pruned, pruned)  # every pair exactly 2x
    assert (exact.value, exact.low, exact.high) == pytest.approx((2.0, 2.0, 2.0))
    noisy = statistics.ratio_of_medians(rng.normal(20.0, 1.0, 21), pruned)
    assert noisy.low < noisy.value < noisy.high and "21 interleaved repeats, paired" in noisy.covers


def test_a_perplexity_ratio_is_exp_of_the_mean_log_likelihood_difference():
    tokens = np.full(10, 100.0)
    nll = np.full(10, 300.0)
    interval = statistics.perplexity_ratio(nll + 10.0, nll, tokens)  # 0.1 nats a token more
    assert interval.value == pytest.approx(math.exp(0.1)) and interval.low == pytest.approx(math.exp(0.1))


def test_over_seeds_a_perplexity_ratio_is_the_ratio_of_seed_mean_perplexities():
    # by hand: one token a window; seed 0 perplexity exp(ln 4 / 2) = 2, seed 1 exp(ln 9 / 2) = 3, the reference 1
    nll = np.array([[0.0, math.log(4.0)], [math.log(9.0), 0.0]])
    reference = np.zeros(2)  # one model's windows, paired with every seed
    interval = statistics.perplexity_ratio(nll, reference, np.ones(2))
    assert interval.value == pytest.approx(2.5) and interval.covers == "2 seeds x 2 windows, paired"
    # windows drawn {0, 0} (chance 1/4) give the seeds perplexities 1 and 9, {1, 1} 4 and 1; with seed draws
    # {0, 0}, {1, 1} (1/4 each): 1 has chance 1/8 (above 2.5%) and 9 has 1/16, the extremes of the interval
    assert interval.low == pytest.approx(1.0) and interval.high == pytest.approx(9.0)


def test_over_seeds_a_perplexity_ratio_matches_a_crossed_bootstrap_loop_written_out():
    rng = np.random.default_rng(11)
    reference = rng.normal(300.0, 20.0, (3, 60))
    # a cost that varies by window alike at every seed: drawing windows per seed would average it away
    nll = reference + rng.normal(2.0, 8.0, 60) + rng.normal(0.0, 1.0, (3, 60))
    tokens = rng.integers(100, 140, 60).astype(float)

    def seed_mean_ratio(x, y, t):
        return np.exp(x.sum(1) / t.sum()).mean() / np.exp(y.sum(1) / t.sum()).mean()

    draws = []
    for _ in range(4000):
        seeds, windows = rng.integers(3, size=3), rng.integers(60, size=60)  # the same windows for every seed
        draws.append(seed_mean_ratio(nll[seeds][:, windows], reference[seeds][:, windows], tokens[windows]))
    interval = statistics.perplexity_ratio(nll, reference, tokens)
    assert interval.value == pytest.approx(seed_mean_ratio(nll, reference, tokens))
    assert (interval.low, interval.high) == pytest.approx(tuple(np.quantile(draws, [0.025, 0.975])), abs=1e-3)
    assert interval.covers == "3 seeds x 60 windows, paired"


def test_over_seeds_a_speed_up_is_the_mean_of_each_seeds_ratio_of_medians():
    rng = np.random.default_rng(2)
    pruned = rng.normal(10.0, 0.2, (2, 9))
    interval = statistics.ratio_of_medians(pruned * [[2.0], [3.0]], pruned)  # seed 0 exactly 2x, seed 1 3x
    # seeds drawn {0, 0}, {0, 1}, {1, 1}: 2, 2.5, 3 with chances 1/4, 1/2, 1/4
    assert (interval.value, interval.low, interval.high) == pytest.approx((2.5, 2.0, 3.0))
    assert interval.covers == "2 seeds x 9 interleaved repeats, paired within each seed"


def test_seeds_timed_a_different_number_of_times_each_resample_their_own_repeats():
    rng = np.random.default_rng(3)
    pruned = [rng.normal(10.0, 0.2, 3), rng.normal(10.0, 0.2, 8)]  # adaptive repeats stopped at 3 and at 8
    interval = statistics.ratio_of_medians_over_seeds([2.0 * pruned[0], 3.0 * pruned[1]], pruned)
    # as above: seeds drawn {0, 0}, {0, 1}, {1, 1} give 2, 2.5, 3, whichever repeats each drawn seed contributes
    assert (interval.value, interval.low, interval.high) == pytest.approx((2.5, 2.0, 3.0))
    assert interval.covers == "2 seeds x 3 to 8 interleaved repeats, paired within each seed"


def test_seeds_timed_equally_often_give_the_interval_of_the_stacked_form():
    rng = np.random.default_rng(4)
    dense, pruned = rng.normal(20.0, 1.5, (3, 7)), rng.normal(10.0, 1.0, (3, 7))
    stacked = statistics.ratio_of_medians(dense, pruned)
    listed = statistics.ratio_of_medians_over_seeds(list(dense), list(pruned))
    by_hand = np.mean([np.median(d) / np.median(p) for d, p in zip(dense, pruned, strict=True)])
    assert listed.value == pytest.approx(by_hand) == pytest.approx(stacked.value)
    # the same two-level bootstrap, other random draws: the ends agree to within the resampling's own noise
    assert (listed.low, listed.high) == pytest.approx((stacked.low, stacked.high), rel=0.01)


@pytest.mark.parametrize("dense, pruned", [([[2.0, 2.0]], [[1.0, 1.0]]),  # one seed
                                           ([[2.0, 2.0], [2.0]], [[1.0, 1.0], [1.0]]),  # a seed timed once
                                           ([[2.0, 2.0], [2.0, 2.0]], [[1.0, 1.0], [1.0, 1.0, 1.0]])])  # unpaired
def test_seeds_without_two_paired_repeats_each_are_refused(dense, pruned):
    with pytest.raises(ValueError, match="at least 2 paired repeats"):
        statistics.ratio_of_medians_over_seeds(dense, pruned)


def test_over_seeds_a_share_difference_averages_each_seeds_difference():
    pairs = np.full((2, 4), 10.0)
    pruned = np.array([[9.0, 9.0, 9.0, 9.0], [7.0, 7.0, 7.0, 7.0]])  # 90% and 70% of one kind's pairs
    other = np.array([[5.0, 5.0, 5.0, 5.0], [5.0, 5.0, 5.0, 5.0]])  # 50% of the other's
    interval = statistics.share_difference(pruned, pairs, other, pairs)
    assert (interval.value, interval.low, interval.high) == pytest.approx((30.0, 20.0, 40.0))
    assert interval.covers == "2 seeds x 4 windows, paired"


def test_seeds_that_do_not_line_up_are_refused():
    with pytest.raises(ValueError, match="same units"):
        statistics.perplexity_ratio(np.ones((2, 5)), np.ones((3, 5)), np.ones(5))


def test_an_interval_must_contain_its_estimate():
    with pytest.raises(ValueError, match="does not contain"):
        Interval(2.0, 0.0, 1.0, "")
    assert Interval(-0.55, -1.1, 0.02, "").text() == "-0.55 [-1.10, +0.02]"
