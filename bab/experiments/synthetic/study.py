"""Notebook 01's study: ``SyntheticExperiment`` (the data and model shape; the training steps are the shared ones of
``bab.experiments.pipelines.heads.BudgetedStudy``), the rows it declares and the rows it builds."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd

from bab.core.outcomes import row_units
from bab.data.synthetic import SyntheticConfig, build_synthetic
from bab.experiments.methods import methods
from bab.experiments.pipelines.heads import BudgetedStudy
from bab.experiments.synthetic.profiles import SyntheticProfile
from bab.heads.encoder import EncoderConfig
from bab.heads.evaluate import evaluate

EXPERIMENT = "synthetic"

# The rows notebook 01 reports: (attribute, method name, mechanism, budget kind, origin[, settings])
SYNTHETIC_METHODS = methods(
    EXPERIMENT,
    ("dense", "dense", "none", "dense", "paper"),
    # the paper's names hold the paper's recipe (flat gates, one-sided Eq. 5); this package's recipe stands beside
    ("scratch", "budgeted from scratch", "heads", "fraction", "paper"),
    ("scratch_ours", "budgeted from scratch, two-sided term", "heads", "fraction", "ours"),
    # each seed of the two rows above on its own: a seed that collapses shows here, not in the mean
    ("scratch_seed", "budgeted from scratch, one seed", "heads", "fraction", "paper", ("seed",)),
    ("scratch_ours_seed", "budgeted from scratch, two-sided term, one seed", "heads", "fraction", "ours", ("seed",)),
    ("warm", "warm-start budgeted", "heads", "fraction", "paper"),
    ("warm_ours", "warm-start budgeted, our recipe", "heads", "fraction", "ours"),
    ("static", "warm-start static", "heads", "fraction", "baseline"),
    ("posthoc", "post-hoc pruning", "heads", "fraction", "baseline"),
    ("hard_adapted", "budgeted hard skip, adapted", "heads", "fraction", "paper"),
    ("sweep_lowest", "budgeted sweep, lowest point", "heads", "fraction", "paper"),
    # every budget of the same soft sweep: the cost's monotonicity in the budget is a claim of its own
    ("sweep", "budgeted sweep, soft", "heads", "fraction", "paper"),
)
METHOD_SETS = (SYNTHETIC_METHODS,)


class SyntheticExperiment(BudgetedStudy):
    """Results are validation accuracy, as in the paper's synthetic tables; no checkpoint selection."""

    experiment = EXPERIMENT
    eval_split = "val"

    def __init__(self, profile: SyntheticProfile, cache=None, progress: bool = True, seed: int | None = None):
        """``seed``: the optimisation seed of the dense model the gated models start from and of every model
        trained from it (None: the first of the profile's ``opt_seeds``). The data seed, the dense grid and the
        from-scratch seeds are the profile's whatever ``seed`` is."""
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be a whole number (e.g. 7, 13 or 21) or None for the profile's first "
                             f"optimisation seed, got {seed!r}")
        super().__init__(profile, cache, progress)
        self.seed = seed

    @property
    def default_seed(self) -> int:
        return self.profile.opt_seeds[0] if self.seed is None else self.seed

    def data_config(self, data_seed: int | None = None) -> SyntheticConfig:
        seed = self.profile.data_seeds[0] if data_seed is None else data_seed
        return replace(self.profile.data, seed=seed)

    def data_lineage(self, data_seed=None) -> dict:
        return self.data_config(data_seed)

    def splits(self, data_seed=None) -> dict:
        train, val = _cached_data(self.data_config(data_seed))
        return {"train": train, "val": val, "test": val}

    def data(self, data_seed: int | None = None):
        """(train, validation) datasets."""
        splits = self.splits(data_seed)
        return splits["train"], splits["val"]

    def model_config(self, gates: str | None = None) -> EncoderConfig:
        d = self.profile.data
        return EncoderConfig(vocab_size=d.vocab_size, num_classes=2, max_len=d.seq_len, gates=gates,
                             **self.profile.model)

    def own_seed_first(self, seeds) -> list[int]:
        """``seeds`` with this study's optimisation seed moved to the front. Runs of notebook 01 at several seeds at
        once (the report at paper) each train their own seed's models first, instead of queueing for the same run
        (``RunCache.training_lock``) one after another."""
        return sorted(seeds, key=lambda seed: seed != self.default_seed)

    def dense_grid(self) -> pd.DataFrame:
        """Dense full attention over the data-seed x optimisation-seed grid, in the profile's order (trained
        with this study's optimisation seed first: ``own_seed_first``)."""
        cells = {}
        for opt_seed in self.own_seed_first(self.profile.opt_seeds):
            for data_seed in self.profile.data_seeds:
                model, metrics, _ = self.dense(data_seed, opt_seed)
                cells[data_seed, opt_seed] = {"data_seed": data_seed, "opt_seed": opt_seed,
                                              "accuracy": evaluate(model, self.data(data_seed)[1])["accuracy"],
                                              "train_seconds": metrics["train_seconds"], "cached": metrics["cached"]}
        return pd.DataFrame([cells[d, o] for d in self.profile.data_seeds for o in self.profile.opt_seeds])

    def posthoc(self, budgets=None):
        return super().posthoc(self.profile.posthoc_budgets if budgets is None else budgets)

    def sweep(self, model, mode: str = "soft", budgets=None) -> pd.DataFrame:
        return super().sweep(model, self.profile.sweep_budgets if budgets is None else budgets, mode=mode)


def synthetic_rows(exp: SyntheticExperiment, *, dense, dense_stats: dict, scratch: dict, scratch_seeds, paper_warm,
                   paper_points,
                   warm, warm_points, static: dict, posthoc, hard, hard_points: list[dict], sweep) -> list[dict]:
    """Notebook 01's result rows, from what it measured on the validation split (``evaluate`` dicts or tables of
    them, whose per-example outcomes go with the rows):

    - ``dense``, ``dense_stats``: the dense model and its evaluation;
    - ``scratch``: {(budget term, seed): (model, soft evaluation at 0.5)} of the budgeted models trained from
      scratch, terms "one-sided (paper)" and "two-sided" (each seed a row, and the mean over ``scratch_seeds``,
      in that order, a row);
    - ``paper_warm``, ``paper_points``: the warm start with the paper's one-sided term, its soft evaluations;
      ``warm``, ``warm_points``: this package's (the b = 1 point left out);
    - ``static``: {budget: (specialist, its soft evaluation)}; ``posthoc``: ``BudgetedStudy.posthoc``'s table;
    - ``hard``, ``hard_points``: the hard-adapted checkpoint and its hard top-k evaluations;
    - ``sweep``: the budgeted checkpoint's soft sweep, whose lowest budget is a row of its own."""
    M = exp.methods
    terms = {"one-sided (paper)": (M.scratch_seed, M.scratch), "two-sided": (M.scratch_ours_seed, M.scratch_ours)}
    return [
        exp.result_row(M.dense, 1.0, dense_stats, models=dense),
        # the paper's method names hold the paper's recipe (one-sided term, flat gates); ours stands beside
        *[exp.result_row(terms[term][0], 0.5, stats, settings={"seed": seed}, models=model)
          for term in terms for (t, seed), (model, stats) in scratch.items() if t == term],
        *[exp.mean_row(terms[term][1], 0.5, [scratch[term, seed] for seed in scratch_seeds]) for term in terms],
        *exp.rows_of(M.warm, paper_points, models=paper_warm),
        *exp.rows_of(M.warm_ours, [p for p in warm_points if p["budget"] < 1], models=warm),
        *exp.rows_of(M.static, [stats for _, stats in static.values()],
                     models={b: model for b, (model, _) in static.items()}),
        *exp.rows_of(M.posthoc, posthoc, models=dense),
        *exp.rows_of(M.hard_adapted, hard_points, models=hard),
        exp.result_row(M.sweep_lowest, sweep.budget.iloc[0],
                       {**sweep.iloc[0].to_dict(), **row_units(sweep, sweep.index[0])},
                       models=warm),
        *exp.rows_of(M.sweep, sweep, models=warm),
    ]


@cache
def _cached_data(config: SyntheticConfig):
    return build_synthetic(config)
