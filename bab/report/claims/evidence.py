"""Where a claim's intervals come from: the rows' per-unit outcomes, paired where two rows share units."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bab.core import statistics
from bab.core.outcomes import align, outcome_key
from bab.core.statistics import Interval
from bab.experiments.profiles import held_out_size
from bab.report.claims.verdicts import _value
from bab.report.results.seeds import row_key

# ----------------------------------------------------------------------------- evidence: what intervals come from

# kinds measured per repeat, not per test unit: each seed's repeats are its own, whatever units it was scored on
TIMINGS = ("dense_ms", "ms")


@dataclass(frozen=True)
class Evidence:
    """What the intervals are computed from besides the merged rows: each seed's own rows of a notebook run at
    several seeds ({notebook: {seed: rows}}), and the report's profile, for the test-set size of rows that do not
    carry their own ``accuracy_n`` (``bab.experiments.profiles.held_out_size``)."""

    seed_rows: dict = field(default_factory=dict)
    profile: str | None = None
    outcomes: dict = field(default_factory=dict)  # {outcome_key(row): per-example outcomes} (bab.core.outcomes)

    def series(self, row: dict | None, kind: str):
        """``row``'s per-unit measurements of ``kind`` (``bab.core.outcomes.KINDS``), or None. A row averaging
        its seed runs' rows (``bab.report.results.seeds``) has those rows' measurements, [seeds, units], where every
        seed's run kept them on the same units."""
        if row is None:
            return None
        own = self.outcomes.get(outcome_key(row, kind))
        return own if own is not None else self._over_seed_runs(row, kind)

    def seed_run_rows(self, row: dict) -> list[dict] | None:
        """The rows of each seed run that ``row`` averages (``bab.report.results.seeds.average_seed_rows``), in its
        seeds' order, or None for a row of one seed or of runs not at hand."""
        seeds = sorted(row.get("seeds") or [])
        if len(seeds) < 2:
            return None
        for runs in self.seed_rows.values():
            per_seed = {int(seed): rows for seed, rows in runs.items()}
            found = [next((r for r in per_seed.get(seed, ()) if row_key(r) == row_key(row)), None) for seed in seeds]
            if all(r is not None for r in found):
                return found
        return None

    def _over_seed_runs(self, row: dict, kind: str) -> np.ndarray | None:
        found = self.seed_run_rows(row)
        if found is None:
            return None
        arrays = [self.outcomes.get(outcome_key(r, kind)) for r in found]
        ids = [self.outcomes.get(outcome_key(r, "unit_ids")) for r in found]
        if any(a is None or a.ndim != 1 or a.shape != arrays[0].shape for a in arrays):
            return None
        if kind not in TIMINGS and (any(i is None for i in ids) != all(i is None for i in ids) or (
                ids[0] is not None and not all(np.array_equal(i, ids[0]) for i in ids))):
            return None  # the seeds' runs were not measured on the same units in the same order
        return arrays[0] if kind == "unit_ids" else np.stack(arrays)

    def stored(self, row: dict, kind: str) -> bool:
        """Whether ``row`` (or every seed run's row it averages) kept its per-unit measurements of ``kind``."""
        if outcome_key(row, kind) in self.outcomes:
            return True
        found = self.seed_run_rows(row)
        return found is not None and all(outcome_key(r, kind) in self.outcomes for r in found)

    def speedup(self, row: dict) -> Interval | None:
        """A speed-up's interval over its interleaved repeats (dense and method timed back to back; over seeds too
        for a row averaging several seeds' models), or None."""
        dense, ours = self.series(row, "dense_ms"), self.series(row, "ms")
        if dense is None and ours is None:
            return self._speedup_over_ragged_seeds(row)
        if dense is None or ours is None or dense.shape != ours.shape or dense.shape[-1] < 2:
            return None
        return statistics.ratio_of_medians(dense, ours)

    def _speedup_over_ragged_seeds(self, row: dict) -> Interval | None:
        """A row averaging seeds whose models were timed a different number of times, each seed's repeats paired."""
        found = self.seed_run_rows(row)
        if found is None:
            return None
        dense = [self.outcomes.get(outcome_key(r, "dense_ms")) for r in found]
        ours = [self.outcomes.get(outcome_key(r, "ms")) for r in found]
        if any(x is None or y is None or x.ndim != 1 or x.shape != y.shape or len(x) < 2
               for x, y in zip(dense, ours, strict=True)):
            return None
        return statistics.ratio_of_medians_over_seeds(dense, ours)

    def perplexity_ratio(self, row: dict, reference: dict) -> Interval | None:
        """Perplexity of ``row`` over ``reference``'s on the same held-out windows, bootstrapped over the windows
        (and the seeds of rows averaging several), or None unless both rows kept each window's log-likelihood."""
        nll, reference_nll = self.matched_outcomes([row, reference], "window_nll") or (None, None)
        tokens = self.matched_outcomes([row], "window_tokens")
        if nll is None or tokens is None or not self.same_seeds([row, reference], [nll, reference_nll]) or not (
                nll.shape[-1] == reference_nll.shape[-1] == tokens[0].shape[-1]):
            return None
        return statistics.perplexity_ratio(nll, reference_nll, tokens[0])

    @staticmethod
    def same_seeds(rows, arrays) -> bool:
        """Whether the [seeds, units] ones of ``arrays`` (``rows``' outcomes) can be paired seed by seed: their rows
        averaged the same seeds. A [units] array is one model's, paired with every seed."""
        stacked = [sorted(row.get("seeds") or []) for row, a in zip(rows, arrays, strict=True) if a.ndim == 2]
        return all(seeds == stacked[0] for seeds in stacked)

    def matched_outcomes(self, rows, kind: str = "correct") -> list[np.ndarray] | None:
        """The ``kind`` outcomes of ``rows`` in one order of units (matched by their unit ids where the rows kept
        them), or None unless every row has them on the same units."""
        arrays = [self.series(m, kind) for m in rows]
        if any(a is None for a in arrays):
            return None
        return align(arrays, [self.series(m, "unit_ids") for m in rows])

    def paired(self, terms, matched) -> Interval | None:
        """The interval of sum(coefficient x accuracy) from the rows' per-example outcomes, paired example by example
        (and over seeds where a row holds several models' outcomes), or None unless every row has them on the same
        examples. A row of one model's outcomes pairs with a row of several seeds' scored on the same examples."""
        arrays = self.matched_outcomes(matched)
        if arrays is None:
            return None
        seeds = max(a.shape[0] if a.ndim == 2 else 1 for a in arrays)
        if any(a.ndim == 2 and a.shape[0] != seeds for a in arrays):
            return None
        combined = sum(c * 100.0 * np.broadcast_to(np.atleast_2d(a), (seeds, a.shape[-1]))
                       for (_, c), a in zip(terms, arrays, strict=True))
        return statistics.paired_difference(combined, np.zeros_like(combined))

    def row_difference(self, row: dict, reference: dict) -> Interval | None:
        """``row``'s accuracy minus ``reference``'s, in points: paired on their per-example outcomes (over the seeds
        both average); where they average different seeds (a calibrated budget that only some seeds' models share),
        each shared seed's models paired on its own examples; else unpaired, from each accuracy and its
        ``accuracy_n``; None when none of these can be had."""
        terms = (("row", 1), ("reference", -1))
        if (interval := self.paired(terms, [row, reference])) is not None:
            return interval
        found = [self.seed_run_rows(r) for r in (row, reference)]
        if None not in found:
            by_seed = [dict(zip(sorted(r["seeds"]), rows, strict=True)) for r, rows in zip((row, reference), found,
                                                                                          strict=True)]
            shared = {seed: [by_seed[0][seed], by_seed[1][seed]] for seed in sorted(by_seed[0].keys() & by_seed[1])}
            if len(shared) > 1 and (interval := self.paired_over_seeds(terms, shared)) is not None:
                return interval
        sizes = [r.get("accuracy_n") for r in (row, reference)]
        if None in sizes:
            return None
        return statistics.unpaired_difference(float(row["accuracy"]), int(sizes[0]), float(reference["accuracy"]),
                                              int(sizes[1]))

    def paired_over_seeds(self, terms, by_seed) -> Interval | None:
        """``paired`` over the seed runs of a notebook: each seed's rows paired on its own test examples."""
        per_seed = [self.matched_outcomes(matched) for matched in by_seed.values()]
        if any(arrays is None for arrays in per_seed) or any(a.ndim != 1 for arrays in per_seed for a in arrays):
            return None
        if len({a.size for arrays in per_seed for a in arrays}) != 1:
            return None
        combined = np.stack([sum(c * 100.0 * a for (_, c), a in zip(terms, arrays, strict=True))
                             for arrays in per_seed])
        return statistics.paired_difference(combined, np.zeros_like(combined))

    def no_interval(self, rows, kind: str, what: str, estimate: str = "point estimate") -> str:
        """Why ``rows`` give only ``estimate`` without an interval, for its line: their per-unit ``what`` (of
        ``kind``) are missing for a row or one of its seeds, or are kept but cannot be paired (other units, other
        seeds)."""
        if not all(self.stored(row, kind) for row in rows):
            seeds = " and seed" if any(len(row.get("seeds") or []) > 1 for row in rows) else ""
            return f"{estimate}: {what} are not stored for every row{seeds}, so no interval"
        return f"{estimate}: {what} are kept but not on the same units and seeds, so no interval"

    def examples(self, row: dict) -> int | None:
        """How many test examples ``row``'s accuracy was measured on, or None when unknown."""
        if row.get("accuracy_n") is not None:
            return int(row["accuracy_n"])
        return None if self.profile is None else held_out_size(row["experiment"], self.profile)

    def per_seed(self, pointers, column: str = "accuracy") -> dict[int, list[dict]]:
        """{seed: the rows ``pointers`` point at in that seed's run}, for the seeds whose run has all of them with a
        ``column``; empty unless at least two seeds do."""
        found = {}
        for by_seed in self.seed_rows.values():
            for seed, rows in by_seed.items():
                matched = [p.find(rows) for p in pointers]
                if all(_value(m, column) is not None for m in matched):
                    found[int(seed)] = matched
        return found if len(found) > 1 else {}

    def accuracy_combination(self, terms, rows) -> Interval | None:
        """The interval, in points, of sum(coefficient * accuracy) over ``terms`` ((Row, coefficient) pairs; e.g.
        ((method, 1), (dense, -1)) for a retention). Over seeds and test examples where the notebook ran at several
        seeds, else over test examples: paired on the per-example outcomes where the rows have them, else a score
        interval from each accuracy and its test-set size (unpaired, wider). None when a test-set size is
        unknown."""
        pointers = [p for p, _ in terms]
        by_seed = self.per_seed(pointers)
        if by_seed and (interval := self.paired_over_seeds(terms, by_seed)) is not None:
            return interval
        if not by_seed and (interval := self.paired(terms, [p.find(rows) for p in pointers])) is not None:
            return interval
        if by_seed:
            values, errors = [], []
            for matched in by_seed.values():
                sizes = [self.examples(m) for m in matched]
                if None in sizes:
                    return None
                values.append(sum(c * float(m["accuracy"]) for (_, c), m in zip(terms, matched, strict=True)))
                errors.append(_combination_error(terms, matched, sizes))
            n = min(self.examples(m) for m in next(iter(by_seed.values())))
            return statistics.seed_differences(values, errors, n)
        matched = [p.find(rows) for p in pointers]
        sizes = [self.examples(m) for m in matched]
        if None in sizes:
            return None
        coefficients = [c for _, c in terms]
        if sorted(coefficients) == [-1, 1]:
            (plus, n_plus), (minus, n_minus) = sorted(zip(matched, sizes, strict=True),
                                                      key=lambda pair: -coefficients[matched.index(pair[0])])
            return statistics.unpaired_difference(float(plus["accuracy"]), n_plus, float(minus["accuracy"]), n_minus)
        value = sum(c * float(m["accuracy"]) for c, m in zip(coefficients, matched, strict=True))
        half = statistics.Z * _combination_error(terms, matched, sizes)
        return Interval(value, value - half, value + half,
                        f"1 training seed: test sampling only, {min(sizes):,} test examples, unpaired (per-example "
                        f"outcomes not stored)")


def _combination_error(terms, matched, sizes) -> float:
    """Standard error, in points, of sum(c * accuracy) treating each accuracy as an independent proportion."""
    variance = 0.0
    for (_, c), m, n in zip(terms, matched, sizes, strict=True):
        p = float(m["accuracy"]) / 100
        variance += c * c * max(p * (1 - p), 0.25 / n) / n  # a 0% or 100% accuracy still carries sampling error
    return 100 * math.sqrt(variance)


def _exact(value: float, covers: str) -> Interval:
    return Interval(value, value, value, covers)


def _seeds_text(rows: list[dict | None]) -> str:
    seeds = sorted({seed for row in rows if row for seed in (row.get("seeds") or [])})
    if not seeds:
        return ""
    return f" (seed{'s' if len(seeds) > 1 else ''} {'/'.join(map(str, seeds))})"
