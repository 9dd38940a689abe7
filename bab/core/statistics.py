"""Intervals for the numbers the claims judge: accuracies, paired differences, ratios.

Every interval is a 95% interval with a line saying what it covers ("3 seeds x 10,000 test examples, paired"),
so a reader knows which sources of noise it carries. Where the raw outcomes exist the interval is a bootstrap
(paired: two models resampled on the same test examples; over seeds too: seeds resampled first, then examples
within each, so the spread of training seeds and the sampling of the test set both show). Where only a row's
accuracy and its test-set size are known, it is a score interval (Wilson for one accuracy, Newcombe's for a
difference of two), unpaired and so wider than a paired one would be.

Resampling uses a fixed generator (``SEED``), so an interval is the same number on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 4000
SEED = 0
Z = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))  # the normal quantile of CONFIDENCE
QUANTILES = [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2]  # a percentile interval's ends


@dataclass(frozen=True)
class Interval:
    """A point estimate with its ``CONFIDENCE`` interval and what the interval covers, in words."""

    value: float
    low: float
    high: float
    covers: str

    def __post_init__(self):
        if not (self.low <= self.value <= self.high) and not any(map(math.isnan, (self.low, self.value, self.high))):
            raise ValueError(f"interval [{self.low}, {self.high}] does not contain its estimate {self.value}")

    def text(self, spec: str = "+.2f") -> str:
        """'-0.55 [-1.10, +0.02]'."""
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"

    def scaled(self, factor: float) -> Interval:
        """The same interval in other units (e.g. a fraction as percentage points)."""
        low, high = sorted((self.low * factor, self.high * factor))
        return Interval(self.value * factor, low, high, self.covers)


def examples_text(n: int, what: str = "test examples") -> str:
    return f"{n:,} {what}"


def _covers(seeds: int, n: int, what: str, paired: bool) -> str:
    pairing = "paired" if paired else "unpaired (per-example outcomes not stored)"
    if seeds > 1:
        return f"{seeds} seeds x {examples_text(n, what)}, {pairing}"
    return f"1 training seed: test sampling only, {examples_text(n, what)}, {pairing}"


def _around(value: float, low, high, covers: str) -> Interval:
    """``value`` with the interval [low, high] widened to contain it (a percentile interval may miss its estimate)."""
    return Interval(value, min(float(low), value), max(float(high), value), covers)


def _paired_bootstrap(arrays, statistic, what: str) -> Interval:
    """``statistic`` of the [units] ``arrays`` with its percentile bootstrap interval, the arrays resampled together."""
    value = float(statistic(*arrays))
    result = stats.bootstrap(tuple(arrays), statistic, paired=True, vectorized=True, confidence_level=CONFIDENCE,
                             n_resamples=RESAMPLES, method="percentile", random_state=np.random.default_rng(SEED))
    return _around(value, *result.confidence_interval, f"{arrays[0].size} {what}, paired")


# ----------------------------------------------------------------------------- from stored counts


def proportion_interval(correct: int, n: int) -> tuple[float, float]:
    """Wilson score interval of an accuracy of ``correct`` of ``n``, as fractions."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"need 0 <= correct <= n and n >= 1, got correct={correct}, n={n}")
    ci = stats.binomtest(int(correct), int(n)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def accuracy_interval(accuracy: float, n: int, seeds: int = 1) -> Interval:
    """An accuracy in % measured on ``n`` test examples: its Wilson interval in %."""
    correct = round(accuracy / 100 * n)
    low, high = proportion_interval(correct, n)
    return _around(accuracy, low * 100, high * 100, _covers(seeds, n, "test examples", paired=False))


def unpaired_difference(accuracy: float, n: int, reference: float, n_reference: int) -> Interval:
    """``accuracy - reference`` in percentage points, both in % of their test sets: Newcombe's hybrid score
    interval (method 10), from the two Wilson intervals. Without the per-example outcomes the two models cannot
    be paired, so this ignores their correlation on shared test examples and is wider than a paired interval."""
    p, q = accuracy / 100, reference / 100
    (l1, u1), (l2, u2) = (proportion_interval(round(p * n), n),
                          proportion_interval(round(q * n_reference), n_reference))
    d = p - q
    low = d - math.sqrt((p - l1) ** 2 + (u2 - q) ** 2)
    high = d + math.sqrt((u1 - p) ** 2 + (q - l2) ** 2)
    return Interval(100 * d, 100 * low, 100 * high, _covers(1, min(n, n_reference), "test examples", paired=False))


def seed_differences(differences, standard_errors, n: int, paired: bool = False) -> Interval:
    """The mean over seeds of per-seed differences ``differences`` (each with its test-sampling standard error):
    a parametric two-level bootstrap, seeds resampled with replacement and each drawn seed's difference perturbed
    by its own sampling error, so the interval carries the seed spread and the test sampling."""
    d, se = np.asarray(differences, float), np.asarray(standard_errors, float)
    if d.ndim != 1 or d.shape != se.shape or d.size == 0:
        raise ValueError(f"need one difference and one standard error per seed, got {d.shape} and {se.shape}")
    rng = np.random.default_rng(SEED)
    picks = rng.integers(d.size, size=(RESAMPLES, d.size))
    draws = (d[picks] + rng.standard_normal(picks.shape) * se[picks]).mean(axis=1)
    return _around(float(d.mean()), *np.quantile(draws, QUANTILES), _covers(d.size, n, "test examples", paired))


def group_difference(values, errors, reference, reference_errors, n: int) -> Interval:
    """The mean of ``values`` minus the mean of ``reference``, each one model per training seed (with its
    test-sampling standard error), the two groups' seeds not paired (e.g. warm-started models against models trained
    from scratch at other seeds): a parametric two-level bootstrap that resamples each group's seeds on its own and
    perturbs each drawn seed by its sampling error, so the interval carries both groups' seed spread."""
    a, sa = np.asarray(values, float), np.asarray(errors, float)
    b, sb = np.asarray(reference, float), np.asarray(reference_errors, float)
    if a.ndim != 1 or a.shape != sa.shape or b.ndim != 1 or b.shape != sb.shape or not a.size or not b.size:
        raise ValueError(f"need one value and one standard error per seed in each group, got {a.shape}, {sa.shape}, "
                         f"{b.shape} and {sb.shape}")
    rng = np.random.default_rng(SEED)
    pick_a, pick_b = rng.integers(a.size, size=(RESAMPLES, a.size)), rng.integers(b.size, size=(RESAMPLES, b.size))
    draws = ((a[pick_a] + rng.standard_normal(pick_a.shape) * sa[pick_a]).mean(axis=1)
             - (b[pick_b] + rng.standard_normal(pick_b.shape) * sb[pick_b]).mean(axis=1))
    return _around(float(a.mean() - b.mean()), *np.quantile(draws, QUANTILES),
                   f"{a.size} + {b.size} training seeds, each group resampled, x {examples_text(n)}, unpaired")


# ----------------------------------------------------------------------------- from per-example outcomes


def _batch(n: int) -> int:
    """Resamples drawn at once: about 10 million values of memory, whatever the test set's size."""
    return max(1, min(RESAMPLES, 10_000_000 // max(n, 1)))


def _as_seeds(outcomes) -> np.ndarray:
    array = np.asarray(outcomes, dtype=float)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"outcomes must be [examples] or [seeds, examples], got shape {array.shape}")
    return array


def paired_difference(outcomes, reference, what: str = "test examples") -> Interval:
    """Mean of ``outcomes - reference`` (per example, e.g. 1 correct / 0 wrong; [examples] or [seeds, examples],
    the two scored on the same examples in the same order), averaged over seeds: a bootstrap that resamples
    seeds, then examples within each drawn seed, the two models always together. Units as given (multiply
    0/1 outcomes by 100 for percentage points)."""
    a, b = _as_seeds(outcomes), _as_seeds(reference)
    if a.shape != b.shape:
        raise ValueError(f"outcomes {a.shape} and reference {b.shape} must pair example for example")
    d = a - b
    seeds, n = d.shape
    value = float(d.mean())
    rng = np.random.default_rng(SEED)
    if np.all(d == d.flat[0]):  # every resample gives the same mean
        return Interval(value, value, value, _covers(seeds, n, what, paired=True))
    if seeds == 1:
        result = stats.bootstrap((d[0],), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                                 method="percentile", random_state=rng, vectorized=True, batch=_batch(n))
        low, high = result.confidence_interval
    else:
        draws = np.empty(RESAMPLES)
        for r in range(RESAMPLES):
            chosen = d[rng.integers(seeds, size=seeds)]
            draws[r] = np.take_along_axis(chosen, rng.integers(n, size=chosen.shape), axis=1).mean()
        low, high = np.quantile(draws, QUANTILES)
    return _around(value, low, high, _covers(seeds, n, what, paired=True))


def ratio_of_medians(numerator, denominator, what: str = "interleaved repeats") -> Interval:
    """``median(numerator) / median(denominator)`` (e.g. dense time over pruned time: a speed-up), bootstrapped
    over the paired repeats (repeat i of both was timed back to back, so they are resampled together). Given
    [seeds, repeats] (one model per seed, each timed on its own), the mean over seeds of each seed's ratio, as a
    row averaging its seeds' speed-ups reads: seeds resampled, then repeats within each drawn seed."""
    a, b = _as_units(numerator, "repeats"), _as_units(denominator, "repeats")
    if a.shape != b.shape or a.shape[-1] < 2:
        raise ValueError(f"need two equally shaped series of at least 2 paired repeats, got {a.shape} and {b.shape}")

    def ratio(x, y, axis=-1):
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    if a.ndim == 2:
        return _over_seeds(lambda x, y: ratio(x, y).mean(axis=-1), (a, b), what, crossed=False)
    return _paired_bootstrap((a, b), ratio, what)


def ratio_of_medians_over_seeds(numerators, denominators, what: str = "interleaved repeats") -> Interval:
    """``ratio_of_medians`` over seeds whose models were timed a different number of times (adaptive repeats stop
    when a speed-up is known well enough): lists of each seed's [repeats], paired within a seed. The mean over seeds
    of each seed's ratio of medians, bootstrapped as its [seeds, repeats] form is: seeds drawn with replacement,
    then each drawn seed's repeats from its own."""
    a = [np.asarray(x, dtype=float) for x in numerators]
    b = [np.asarray(y, dtype=float) for y in denominators]
    counts = np.array([len(x) for x in a])
    if len(a) < 2 or len(a) != len(b) or any(x.shape != y.shape or x.ndim != 1 for x, y in zip(a, b, strict=True)) \
            or counts.min() < 2:
        raise ValueError("need two or more seeds, each with equally long series of at least 2 paired repeats")
    seeds, longest = len(a), int(counts.max())
    padded = [np.full((seeds, longest), np.nan) for _ in range(2)]
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        padded[0][i, : len(x)], padded[1][i, : len(y)] = x, y
    value = float(np.mean([np.median(x) / np.median(y) for x, y in zip(a, b, strict=True)]))
    rng = np.random.default_rng(SEED)
    batch = _batch(seeds * longest)
    draws = []
    for start in range(0, RESAMPLES, batch):
        size = min(batch, RESAMPLES - start)
        chosen = rng.integers(seeds, size=(size, seeds, 1))
        n = counts[chosen]  # [size, seeds, 1]: each drawn seed's own number of repeats
        units = (rng.random((size, seeds, longest)) * n).astype(int)
        kept = np.arange(longest) < n  # a drawn seed contributes as many repeats as it has
        x, y = (np.where(kept, p[chosen, units], np.nan) for p in padded)
        draws.append((np.nanmedian(x, axis=-1) / np.nanmedian(y, axis=-1)).mean(axis=-1))
    return _around(value, *np.quantile(np.concatenate(draws), QUANTILES),
                   f"{seeds} seeds x {int(counts.min())} to {longest} {what}, paired within each seed")


def perplexity_ratio(nll, reference_nll, tokens, what: str = "windows") -> Interval:
    """Perplexity of one model over another's on the same windows: exp(sum nll / sum tokens) of each, from
    per-window summed negative log-likelihoods and token counts, bootstrapped over the windows together. Given
    [seeds, windows] (a reference or token counts of one model may stay [windows]), the ratio of the seed-mean
    perplexities, as rows averaging their seeds' perplexities read: seeds and windows resampled, crossed (every
    seed was scored on the same windows, so one draw of windows serves every seed)."""
    a, b, t = _broadcast_seeds(*(_as_units(x, "windows") for x in (nll, reference_nll, tokens)))
    if a.shape[-1] < 2:
        raise ValueError(f"need per-window nll, reference nll and token counts of one length >= 2, got {a.shape}")

    def ratio(x, y, n, axis=-1):
        return np.exp((x.sum(axis=axis) - y.sum(axis=axis)) / n.sum(axis=axis))

    if a.ndim == 2:
        def seed_mean_ratio(x, y, n):
            return np.exp(x.sum(-1) / n.sum(-1)).mean(-1) / np.exp(y.sum(-1) / n.sum(-1)).mean(-1)

        return _over_seeds(seed_mean_ratio, (a, b, t), what, crossed=True)
    return _paired_bootstrap((a, b, t), ratio, what)


def share_difference(pruned, pairs, other_pruned, other_pairs, what: str = "windows") -> Interval:
    """In percentage points, the share of one kind's pairs that were pruned (sum pruned / sum pairs) minus another
    kind's, from per-window counts of both kinds on the same windows, bootstrapped over the windows together. Given
    [seeds, windows], the mean over seeds of each seed's difference: seeds and windows resampled, crossed."""
    arrays = _broadcast_seeds(*(_as_units(x, "windows") for x in (pruned, pairs, other_pruned, other_pairs)))
    if arrays[0].shape[-1] < 2:
        raise ValueError(f"need four per-window counts of one length >= 2, got {[a.shape for a in arrays]}")

    def difference(a, n, b, m, axis=-1):
        return 100.0 * (a.sum(axis=axis) / n.sum(axis=axis) - b.sum(axis=axis) / m.sum(axis=axis))

    if arrays[0].ndim == 2:
        return _over_seeds(lambda *x: difference(*x).mean(axis=-1), arrays, what, crossed=True)
    return _paired_bootstrap(arrays, difference, what)


def _as_units(values, what: str) -> np.ndarray:
    """[units], or [seeds, units] with more than one seed ([1, units] is read as [units])."""
    array = np.asarray(values, dtype=float)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim not in (1, 2):
        raise ValueError(f"need [{what}] or [seeds, {what}], got shape {array.shape}")
    return array


def _broadcast_seeds(*arrays: np.ndarray) -> list[np.ndarray]:
    """``arrays`` on one shape: a [units] array beside [seeds, units] ones is one model's (or one count's), the same
    at every seed."""
    seeds = {a.shape[0] for a in arrays if a.ndim == 2}
    units = {a.shape[-1] for a in arrays}
    if len(seeds) > 1 or len(units) > 1:
        raise ValueError(f"need arrays on the same units (and seeds), got shapes {[a.shape for a in arrays]}")
    if not seeds:
        return list(arrays)
    shape = (seeds.pop(), units.pop())
    return [np.broadcast_to(a, shape) for a in arrays]


def _over_seeds(statistic, arrays, what: str, crossed: bool) -> Interval:
    """``statistic`` (of [..., seeds, units] arrays, a value per leading index) with its percentile interval from a
    two-level bootstrap: seeds drawn with replacement, then units, the arrays always together. ``crossed``: every
    seed was measured on the same units (the same test windows), so one draw of units serves every drawn seed and
    the test set's sampling is counted once, not averaged away over seeds; otherwise (each seed's own repeats) units
    are drawn within each drawn seed."""
    seeds, n = arrays[0].shape
    value = float(statistic(*arrays))
    rng = np.random.default_rng(SEED)
    batch = _batch(seeds * n)
    draws = []
    for start in range(0, RESAMPLES, batch):
        size = min(batch, RESAMPLES - start)
        chosen = rng.integers(seeds, size=(size, seeds, 1))
        units = rng.integers(n, size=(size, 1, n) if crossed else (size, seeds, n))
        draws.append(statistic(*(a[chosen, units] for a in arrays)))
    return _around(value, *np.quantile(np.concatenate(draws), QUANTILES),
                   f"{seeds} seeds x {examples_text(n, what)}, paired" + ("" if crossed else " within each seed"))
