"""Which recipe makes hard head skipping keep what the soft gates promise (docs/budgeted-heads.md, "The
hard-adaptation recipe").

Each ``RecipeVariant`` changes the soft phase (warm-start budgeted gates), the hard adaptation (Eq. 6), or both,
relative to a study's profile. For every variant ``recipe_ablation`` reports, at each budget: the soft
checkpoint's validation accuracy and cost, the hard top-k accuracy before adaptation, and after it on validation
and test; and the gate spread (std of g(0.5) across heads: near 0, the soft model met the cost by shrinking every
head alike and its top-k is close to arbitrary). The recipe is chosen on validation only (``choose_recipe``).
Every model goes through the study's run cache, keyed by its whole lineage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from bab.heads.evaluate import evaluate


@dataclass(frozen=True)
class RecipeVariant:
    """One row of the ablation: TrainConfig overrides of the soft phase and of the hard adaptation. The overrides of
    a nested config (``gate_start``, ``adaptation``) are a dict of the fields they change (``overridden``)."""

    name: str
    question: str  # which question the row answers ("budget sampling", "epochs", ...)
    soft: dict = field(default_factory=dict)  # overrides of the profile's warm-start budgeted config
    hard: dict = field(default_factory=dict)  # overrides of the profile's hard-adaptation config


# The paper's recipe, from which every row departs: flat gates and the one-sided Eq. 5 in the soft phase; one
# epoch of straight-through adaptation with b ~ U[0.1, 1] per batch, distilled from the soft checkpoint at the
# same budget, global top-k. Learning rate, distillation weight / temperature and whether the controller is
# frozen are the profile's (the paper publishes none of them; it freezes the controller for pretrained BERT).
PAPER_SOFT = dict(gate_start=dict(how="flat"), two_sided=False)
PAPER_HARD = dict(epochs=1, budget=None, budget_choices=None, adaptation=dict(kd_teacher="soft", min_per_layer=0))
BASE = RecipeVariant("paper recipe", "base")
CHOSEN = RecipeVariant("chosen recipe (the profile's)", "chosen")

# The rows of the hard-adaptation diagnosis, in two blocks. First how the soft phase starts and which budget term it
# uses (then adapted with the paper's hard recipe); then, on the best start of the first block (nested by
# elimination, two-sided: ``NESTED``), one component of the hard adaptation at a time.
GATE_START = (
    RecipeVariant("gates nested, random order", "gate start", soft={"gate_start": {"how": "random"}}),
    RecipeVariant("gates nested by ablation", "gate start", soft={"gate_start": {"how": "ablation"}}),
    RecipeVariant("gates nested by elimination", "gate start", soft={"gate_start": {"how": "elimination"}}),
    RecipeVariant("flat gates, two-sided budget term", "budget term", soft={"two_sided": True}),
    RecipeVariant("nested by elimination, two-sided", "budget term",
                  soft={"gate_start": {"how": "elimination"}, "two_sided": True}),
)
NESTED = {"gate_start": {"how": "elimination"}, "two_sided": True}
HARD_PHASE = tuple(RecipeVariant(f"nested + {name}", question, soft=NESTED, hard=hard) for name, question, hard in (
    ("budgets from {0.25, 0.5, 0.75}", "budget sampling", {"budget_choices": (0.25, 0.5, 0.75)}),
    ("budget fixed at 0.5", "budget sampling", {"budget": 0.5}),
    ("2 epochs", "epochs", {"epochs": 2}),
    ("3 epochs", "epochs", {"epochs": 3}),
    ("lr x 0.4", "learning rate", {"lr_scale": 0.4}),
    ("lr x 2", "learning rate", {"lr_scale": 2.0}),
    ("no distillation (beta 0)", "distillation", {"adaptation": {"kd_beta": 0.0}}),
    ("beta 0.9", "distillation", {"adaptation": {"kd_beta": 0.9}}),
    ("temperature 4", "distillation", {"adaptation": {"kd_temperature": 4.0}}),
    ("dense teacher", "teacher", {"adaptation": {"kd_teacher": "dense"}}),
    ("controller frozen", "controller", {"adaptation": {"freeze_gates": True}}),
    ("straight-through controller", "controller", {"adaptation": {"freeze_gates": False}}),
    ("per-layer floor 1", "per-layer floor", {"adaptation": {"min_per_layer": 1}}),
))
VARIANTS = {v.name: v for v in (BASE, *GATE_START, *HARD_PHASE, CHOSEN)}
# The rows that carry the choice of recipe, for a report that must fit in minutes: the paper's recipe, its soft
# phase changed (gates nested by elimination, two-sided term; adapted as the paper does), then the chosen recipe
# (the same soft phase, 3 epochs of adaptation). Which of the two soft-phase changes matters (most of the gain
# is committing to an order), and the 13 hard-phase rows that each moved the mean by under 0.3 points at quick,
# are in the full ablation (``-p recipe_rows all``; docs/budgeted-heads.md).
DECISIVE = ("paper recipe", "nested by elimination, two-sided", CHOSEN.name)


def variant_configs(study, variant: RecipeVariant):
    """(soft TrainConfig, hard TrainConfig) of ``variant`` on ``study``'s profile: the paper's recipe with the
    variant's overrides, or the profile's own configs for ``CHOSEN``. ``lr_scale`` multiplies the profile's hard
    learning rate; ``budget`` (one fixed budget) replaces the sampling."""
    p = study.profile
    if variant == CHOSEN:
        return p.warm, p.hard_adapt
    hard = _merged(PAPER_HARD, variant.hard)
    if "lr_scale" in hard:
        hard["lr"] = p.hard_adapt.lr * hard.pop("lr_scale")
    return overridden(p.warm, _merged(PAPER_SOFT, variant.soft)), overridden(p.hard_adapt, hard)


def _merged(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides``; the overrides of a nested config (a dict) merged into ``base``'s."""
    return {**base, **{k: {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                       for k, v in overrides.items()}}


def overridden(config, overrides: dict):
    """``config`` with ``overrides``; a dict for a nested config (``gate_start``, ``adaptation``) changes only the
    fields it names."""
    return replace(config, **{k: replace(getattr(config, k), **v) if isinstance(v, dict) else v
                              for k, v in overrides.items()})


def paper_recipe_models(study):
    """(soft model, hard-adapted model) of the paper's recipe on ``study``'s profile: the ablation's first row,
    served by the run cache when the ablation has run (trained otherwise)."""
    soft_config, hard_config = variant_configs(study, BASE)
    soft = study.warm_start_budgeted(soft_config)
    hard, _, _ = study.hard_adapted(hard_config, soft=soft)
    return soft[0], hard


def gate_spread(model, budget: float = 0.5) -> float:
    """Std of the soft gates g_lh(b) across all heads: ~0 when every head is shrunk alike."""
    return float(model.gates(budget).detach().std())


def adaptation_kept(hard_metrics: dict) -> bool:
    """Whether checkpoint selection kept the adapted weights (epoch 0 is the unadapted checkpoint)."""
    return hard_metrics.get("selected_epoch") != 0


def adaptation_summary(soft_model, hard_metrics: dict) -> str:
    """One line for a notebook: the soft checkpoint's gate spread and whether adaptation was kept."""
    verdict = ("kept (it raised validation accuracy)" if adaptation_kept(hard_metrics)
               else "not kept: the unadapted checkpoint scored higher on validation")
    return f"gate spread (std of g(0.5) across heads): {gate_spread(soft_model):.3f}; adaptation {verdict}"


def recipe_ablation(study, variants, budgets=(0.25, 0.50, 0.75), test_split: str = "test") -> pd.DataFrame:
    """One row per variant (see the module docstring); hard accuracy in hard mode under the variant's floor."""
    splits = study.splits()
    rows = []
    for variant in variants:
        soft_config, hard_config = variant_configs(study, variant)
        soft = study.warm_start_budgeted(soft_config)
        soft_model = soft[0]
        hard_model, metrics, _ = study.hard_adapted(hard_config, soft=soft)
        soft_model.min_per_layer = hard_config.adaptation.min_per_layer  # "before adaptation": the same top-k rule
        row = {"question": variant.question, "variant": variant.name,
               "gate std @0.5": gate_spread(soft_model), "kept unadapted": not adaptation_kept(metrics)}
        for b in budgets:
            soft_val = evaluate(soft_model, splits["val"], budget=b, mode="soft")
            row[f"soft cost @{b}"] = soft_val["cost"]
            row[f"soft val @{b}"] = soft_val["accuracy"]
            row[f"before val @{b}"] = evaluate(soft_model, splits["val"], budget=b, mode="hard")["accuracy"]
            row[f"hard val @{b}"] = evaluate(hard_model, splits["val"], budget=b, mode="hard")["accuracy"]
            row[f"hard test @{b}"] = evaluate(hard_model, splits[test_split], budget=b, mode="hard")["accuracy"]
        soft_model.min_per_layer = 0
        row["mean hard val"] = sum(row[f"hard val @{b}"] for b in budgets) / len(budgets)
        row["mean soft val"] = sum(row[f"soft val @{b}"] for b in budgets) / len(budgets)
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


def choose_recipe(table: pd.DataFrame) -> str:
    """The variant with the best mean hard validation accuracy over the budgets (ties: the earlier row).
    Test columns are never read."""
    return str(table["mean hard val"].idxmax())


def compact(table: pd.DataFrame, budgets=(0.25, 0.50, 0.75)) -> pd.DataFrame:
    """The columns a reader compares: gate spread, soft cost, and per budget soft / before / after accuracy."""
    columns = ["question", "gate std @0.5", *[f"soft cost @{b}" for b in budgets]]
    for b in budgets:
        columns += [f"soft val @{b}", f"before val @{b}", f"hard val @{b}", f"hard test @{b}"]
    return table[columns + ["mean hard val", "kept unadapted"]]
