"""Notebooks run once per seed, and their rows averaged: the papers' tables that are means over seeds.

The budgeted-attention paper reports its synthetic and custom AG News tables as means over optimisation seeds
7 / 13 / 21. A notebook stays one seed from top to bottom (its ``seed`` parameter); where its profile lists
``report_seeds``, the report runs it once per seed, each run saved as ``<stem>-seed<N>`` (page, results, run
record), and the front page, ``results.json`` and the claims read one row per method and budget:

- rows of several seed runs that measured **the same trained models** (``runs``) are one measurement read again
  (notebook 01's from-scratch seeds, trained by a loop inside every run): the first is kept;
- rows that measured **different models** are averaged: the mean of every measured column, the sample standard
  deviation of the accuracy (``accuracy_std``), and the union of their runs, seeds and training commits.

A row that only some seed runs wrote (a run failed) is the mean of the seeds that have it; its ``seeds`` say which.
"""

from __future__ import annotations

import re
import statistics

from bab.experiments.profiles import get_profile
from bab.experiments.registry import NOTEBOOKS

# notebook stem -> the experiment whose profile lists the seeds the report runs it at (``report_seeds``): the
# notebooks the registry marks seeded
SEEDED_NOTEBOOKS = {notebook.stem: notebook.experiment for notebook in NOTEBOOKS if notebook.seeded}

SEED_SUFFIX = "-seed"  # a run at seed 7 of 02_ag_news_custom is saved as 02_ag_news_custom-seed7
SEED_STEM = re.compile(rf"^(?P<notebook>.+){SEED_SUFFIX}(?P<seed>\d+)$")

# the columns averaged over seeds; intervals of one measurement (zero-shot ``accuracy_low`` ...) are not
AVERAGED = ("cost", "accuracy", "speedup", "perplexity", "memory_ratio", "analytic_limit", "value")
DROPPED = ("accuracy_low", "accuracy_high", "accuracy_n", "accuracy_std")


def notebook_seeds(stem: str, profile: str) -> tuple[int, ...]:
    """The seeds the report runs notebook ``stem`` at under ``profile``, one run each; () runs it once, at the
    seed its profile sets (every notebook at smoke and quick, and those whose papers report one seed)."""
    experiment = SEEDED_NOTEBOOKS.get(stem)
    if experiment is None:
        return ()
    seeds = tuple(get_profile(experiment, profile).report_seeds)
    return seeds if len(seeds) > 1 else ()


def seed_stem(stem: str, seed: int | None) -> str:
    """The name a notebook's run at ``seed`` is saved under: ``02_ag_news_custom-seed7``; ``stem`` for None."""
    return stem if seed is None else f"{stem}{SEED_SUFFIX}{seed}"


def split_seed_stem(stem: str) -> tuple[str, int | None]:
    """(notebook stem, seed) of a saved run's name; (stem, None) for a run at the profile's own seed."""
    match = SEED_STEM.match(stem)
    return (stem, None) if match is None else (match["notebook"], int(match["seed"]))


def row_key(row: dict) -> tuple:
    """What makes two rows the same point of a table: experiment, method, budget and settings."""
    return (row["experiment"], row["method"], row["budget"], tuple(sorted((row.get("settings") or {}).items())))


def average_seed_rows(rows_by_seed: dict[int, list[dict]]) -> list[dict]:
    """One notebook's rows from its runs at several seeds ({seed: rows}) as one list, first appearance first:
    rows of the same models kept once, rows of different models averaged (module docstring)."""
    groups: dict[tuple, list[dict]] = {}
    for seed in sorted(rows_by_seed):
        for row in rows_by_seed[seed]:
            groups.setdefault(row_key(row), []).append(row)
    return [_one_row(rows) for rows in groups.values()]


def _one_row(rows: list[dict]) -> dict:
    first = rows[0]
    if all(row.get("runs") == first.get("runs") for row in rows):
        return dict(first)  # the same trained models, measured again by another seed's run
    row = {key: value for key, value in first.items() if key not in DROPPED}
    for column in AVERAGED:
        values = [r.get(column) for r in rows]
        row[column] = None if any(v is None for v in values) else statistics.fmean(values)
    accuracies = [r.get("accuracy") for r in rows]
    if None not in accuracies:
        row["accuracy_std"] = statistics.stdev(accuracies)
    row["runs"] = _union(r.get("runs") or [] for r in rows)
    row["seeds"] = sorted(set(_union(r.get("seeds") or [] for r in rows)) - {None})
    if any("trained_at" in r for r in rows):
        row["trained_at"] = _union(r.get("trained_at") or [] for r in rows)
    if any("cache_hits" in r for r in rows):
        row["cache_hits"] = sum(r.get("cache_hits", 0) for r in rows)
    return {key: value for key, value in row.items() if value is not None or key in first}


def _union(lists) -> list:
    return list(dict.fromkeys(item for items in lists for item in items))


def combine_seed_results(results: dict[str, tuple]) -> tuple[dict[str, tuple], dict[str, dict[int, list[dict]]]]:
    """Results files by saved name ({stem: (contract, rows)}, seed runs named ``<stem>-seed<N>``) as
    ({notebook stem: (contract, rows)}, {notebook stem: {seed: rows}}): each seeded notebook's runs replaced by
    its averaged rows (``average_seed_rows``), and the per-seed rows it came from. Seed runs of an older results
    contract than the newest among them are left out of the average."""
    combined, by_seed = {}, {}
    seeded: dict[str, dict[int, tuple]] = {}
    for stem, (contract, rows) in results.items():
        notebook, seed = split_seed_stem(stem)
        if seed is None:
            combined[stem] = (contract, rows)
        else:
            seeded.setdefault(notebook, {})[seed] = (contract, rows)
    for notebook, runs in seeded.items():
        newest = max((contract for contract, _ in runs.values() if contract is not None), default=None)
        rows_by_seed = {seed: rows for seed, (contract, rows) in sorted(runs.items()) if contract == newest}
        by_seed[notebook] = rows_by_seed
        combined[notebook] = (newest, average_seed_rows(rows_by_seed))  # replaces a single-seed run's rows
    return combined, by_seed


def seed_table(rows_by_seed: dict[int, list[dict]]) -> list[dict]:
    """Per averaged row (one measured on different models at two or more seeds): its accuracy at each seed
    (None where that seed's run has no such row), and their mean and sample std: where a reader looks for a seed
    that collapsed."""
    seeds = sorted(rows_by_seed)
    table = []
    for row in average_seed_rows(rows_by_seed):
        matches = {seed: next((r for r in rows_by_seed[seed] if row_key(r) == row_key(row)), None) for seed in seeds}
        found = [r for r in matches.values() if r is not None]
        if len(found) < 2 or all(r.get("runs") == found[0].get("runs") for r in found):
            continue
        table.append({"experiment": row["experiment"], "method": row["method"], "budget": row["budget"],
                      "settings": row.get("settings") or {},
                      "accuracy": {seed: None if r is None else r.get("accuracy") for seed, r in matches.items()},
                      "mean": row.get("accuracy"), "std": row.get("accuracy_std")})
    return table
