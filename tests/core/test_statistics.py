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


def test_an_interval_must_contain_its_estimate():
    with pytest.raises(ValueError, match="does not contain"):
        Interval(2.0, 0.0, 1.0, "")
    assert Interval(-0.55, -1.1, 0.02, "").text() == "-0.55 [-1.10, +0.02]"
