"""Notebook 02's study: ``TextStudy`` (a text-classification CSV, checkpoints selected on validation, results on
test), the rows it declares and the rows it builds; ``real_text_batches`` for the heads bench."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import torch

from bab.core.runs import RunCache
from bab.data.text import build_text_classification
from bab.experiments.methods import methods
from bab.experiments.pipelines.heads import BudgetedStudy
from bab.experiments.text.profiles import TextProfile
from bab.heads.encoder import EncoderConfig
from bab.heads.evaluate import evaluate
from bab.heads.train import TrainConfig

# The rows notebook 02 reports: (attribute, method name, mechanism, budget kind, origin)
AG_NEWS_METHODS = methods(
    "ag_news_custom",
    ("dense", "dense", "none", "dense", "paper"),
    # the paper's names hold the paper's recipe (the ablation's first row); this package's recipe stands beside
    ("warm", "warm-start budgeted", "heads", "fraction", "paper"),
    ("warm_ours", "warm-start budgeted, our recipe", "heads", "fraction", "ours"),
    ("static", "warm-start static", "heads", "fraction", "baseline"),
    ("posthoc", "post-hoc pruning", "heads", "fraction", "baseline"),
    ("soft_latency", "budgeted soft (latency)", "heads", "fraction", "ours"),
    ("hard_unadapted", "hard skip, no adaptation", "heads", "fraction", "paper"),
    ("hard_unadapted_ours", "hard skip, no adaptation, our recipe", "heads", "fraction", "ours"),
    ("hard_adapted", "budgeted hard skip, adapted", "heads", "fraction", "paper"),
    ("hard_adapted_ours", "budgeted hard skip, adapted, our recipe", "heads", "fraction", "ours"),
    ("static_hard", "static hard skip", "heads", "fraction", "baseline"),
)
METHOD_SETS = (AG_NEWS_METHODS,)


class TextStudy(BudgetedStudy):
    eval_split = "test"

    def __init__(self, profile: TextProfile, experiment: str, cache: RunCache | None = None, progress: bool = True,
                 seed: int | None = None, data_path=None, ledger=None):
        if seed is not None:
            profile = replace(profile, seed=seed)
        super().__init__(profile, cache, progress, ledger)
        self.experiment = experiment
        self.data_path = data_path

    def build(self):
        """(train, val, test, tokenizer, info) for the profile's sizes and seed (built once per process)."""
        p = self.profile
        return _cached_build(p.dataset, p.num_train, p.num_val, p.num_test, p.max_len, p.seed, p.max_vocab,
                             None if self.data_path is None else str(self.data_path))

    def splits(self, data_seed=None) -> dict:
        built = self.build()
        return {"train": built.train, "val": built.val, "test": built.test}

    def data_lineage(self, data_seed=None) -> dict:
        p = self.profile
        # the source folder is not part of the key: the same CSV read from another path is the same data
        return {"dataset": p.dataset, "num_train": p.num_train, "num_val": p.num_val, "num_test": p.num_test,
                "max_len": p.max_len, "seed": p.seed, "max_vocab": p.max_vocab,
                "vocab_size": self.build().tokenizer.vocab_size}

    def model_config(self, gates: str | None = None) -> EncoderConfig:
        built = self.build()
        return EncoderConfig(vocab_size=built.tokenizer.vocab_size, num_classes=built.info["num_classes"],
                             max_len=self.profile.max_len, gates=gates, **self.profile.model)

    def selection(self, train_config: TrainConfig):
        """Validation accuracy: dense as is; gated models at the budgets they serve."""
        val = self.splits()["val"]
        if train_config.objective == "dense":
            return lambda model: evaluate(model, val)["accuracy"]
        mode = "hard" if train_config.objective == "hard_adapt" else "soft"
        budgets = [train_config.budget] if train_config.budget is not None else list(self.profile.budgets)
        return lambda model: sum(evaluate(model, val, budget=b, mode=mode)["accuracy"] for b in budgets) / len(budgets)

    def timing_batches(self) -> list[torch.Tensor]:
        """Pre-tokenized test batches for the latency protocol."""
        ids = self.splits()["test"].tensors[0][: self.profile.timing_examples]
        return list(ids.split(self.profile.timing_batch_size))


def ag_news_rows(study: TextStudy, *, dense, dense_test: dict, paper: dict, warm, warm_points, static: dict,
                 posthoc, soft_at_half: dict, hard, static_hard: dict, skip_stats: dict, latency) -> list[dict]:
    """Notebook 02's result rows, from what it measured on the test split (each an ``evaluate`` dict, which carries
    its per-example outcomes to the row):

    - ``dense``, ``dense_test``: the dense model and its evaluation;
    - ``paper``: the paper's recipe, {"soft": model, "hard": model, "soft points": [soft evaluations at the
      budgets], "unadapted": [hard top-k evaluations of the soft model], "adapted": [of the hard-adapted one]};
    - ``warm``, ``warm_points``: this package's budgeted checkpoint and its soft evaluations;
    - ``static``: {budget: (static specialist, its soft evaluation)}; ``posthoc``: the dense model's post-hoc
      pruning table (``BudgetedStudy.posthoc``);
    - ``soft_at_half``: the budgeted checkpoint's soft evaluation at 0.5, timed as "budgeted soft @0.50";
    - ``hard``, ``static_hard``: the hard-adapted checkpoint and specialists ({budget: model});
      ``skip_stats``: {budget: {"budgeted, no adaptation" | "budgeted, adapted" | "static, adapted": skip-mode
      evaluation}}, timed as "budgeted hard skip @b" and "static hard skip @b" in ``latency``
      (``bab.heads.bench.latency_table``)."""
    M = study.methods
    ours = "our recipe: nested gate start, two-sided term"
    skip = {name: [stats[name] for stats in skip_stats.values()] for name in next(iter(skip_stats.values()))}
    return [
        study.result_row(M.dense, 1.0, dense_test, models=dense),
        # the paper's method names hold the paper's recipe; this package's stands beside it
        *study.rows_of(M.warm, paper["soft points"], models=paper["soft"]),
        *study.rows_of(M.warm_ours, warm_points, models=warm),
        *study.rows_of(M.static, [stats for _, stats in static.values()], note=ours,
                       models={b: model for b, (model, _) in static.items()}),
        *study.rows_of(M.posthoc, posthoc, models=dense),
        study.timed_row(M.soft_latency, 0.5, soft_at_half, latency, "budgeted soft @0.50", models=warm),
        *study.rows_of(M.hard_unadapted, paper["unadapted"], models=paper["soft"]),
        *study.rows_of(M.hard_adapted, paper["adapted"], models=paper["hard"]),
        *study.rows_of(M.hard_unadapted_ours, skip["budgeted, no adaptation"], models=warm),
        *[study.timed_row(M.hard_adapted_ours, s["budget"], s, latency, f"budgeted hard skip @{s['budget']:.2f}",
                          models=hard) for s in skip["budgeted, adapted"]],
        *[study.timed_row(M.static_hard, s["budget"], s, latency, f"static hard skip @{s['budget']:.2f}", note=ours,
                          models=static_hard[s["budget"]]) for s in skip["static, adapted"]],
    ]


@cache
def _cached_build(dataset, num_train, num_val, num_test, max_len, seed, max_vocab, path):
    return build_text_classification(dataset, num_train=num_train, num_val=num_val, num_test=num_test,
                                     max_len=max_len, seed=seed, max_vocab=max_vocab, path=path)


def real_text_batches(dataset: str = "ag_news", profile: str = "quick") -> tuple[list[torch.Tensor], dict]:
    """Pre-tokenized test batches of a text data set, and the encoder shape of that profile."""
    from bab.experiments.profiles import get_profile

    study = TextStudy(get_profile(f"{dataset}_custom", profile), experiment=f"{dataset}_custom")
    return study.timing_batches(), dict(study.profile.model)
