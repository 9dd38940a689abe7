"""The budgeted-heads method's recipe for a user's own data: what ``BudgetedClassifier.fit`` and ``fit heads``
train, stage by stage (``Recipe.train_configs``). The notebooks size their own profiles; tuning one never changes
this recipe."""

from __future__ import annotations

from dataclasses import dataclass

from bab.core.budget import GATE_STARTS, validate_budget
from bab.heads.train import TrainConfig


@dataclass(frozen=True)
class Recipe:
    """How ``fit`` trains. The defaults are notebook 03's MiniLM recipe (bab.experiments.bert), including its
    hard-adaptation recipe (docs/budgeted-heads.md, "The hard-adaptation recipe").

    ``batch_size`` is the global batch: under ``accelerate launch`` with N processes each takes
    ``batch_size / N`` examples of every step (N must divide it), so N processes follow the same optimisation
    as one.
    """

    max_len: int = 128  # tokens per text (longer texts are truncated, as in the paper's BERT protocol)
    batch_size: int = 16
    dense_epochs: int = 2
    budgeted_epochs: int = 1
    hard_epochs: int = 2  # 0: no hard adaptation; 2, as chosen on validation for MiniLM (docs/budgeted-heads.md)
    dense_lr: float = 1e-4
    lr: float = 5e-5  # budgeted and hard adaptation
    gate_lr: float = 1e-2
    lambda_cost: float = 0.05
    lambda_viol: float = 20.0
    budget_min: float = 0.1  # budgeted training samples b ~ U[budget_min, 1]
    # the soft phase of the hard-adaptation recipe: a two-sided budget term, so the cost tracks the request from
    # below too, and gates that start nested in order of head importance (one-at-a-time ablation on this many
    # training examples), so the soft model commits to heads and the hard top-k keeps what it promised
    two_sided: bool = True
    gate_start: str = "ablation"  # bab.core.budget.GATE_STARTS: "flat" (the paper), "random", "ablation", ...
    gate_start_examples: int = 128
    kd_beta: float = 0.5
    kd_temperature: float = 2.0
    val_fraction: float = 0.1  # held out of the training data when no validation data is given
    seed: int = 13

    def __post_init__(self):
        if self.max_len < 3:
            raise ValueError(f"Recipe.max_len must leave room for [CLS], [SEP] and a word, got {self.max_len}")
        if min(self.dense_epochs, self.budgeted_epochs) < 1 or self.hard_epochs < 0:
            raise ValueError("Recipe: dense_epochs and budgeted_epochs must be >= 1 and hard_epochs >= 0, got "
                             f"{self.dense_epochs}, {self.budgeted_epochs}, {self.hard_epochs}")
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"Recipe.val_fraction must lie in [0, 1), got {self.val_fraction}")
        validate_budget(self.budget_min)
        if self.gate_start not in GATE_STARTS:
            raise ValueError(f"Recipe.gate_start must be one of {GATE_STARTS} (how the gates start), got "
                             f"{self.gate_start!r}")

    def train_configs(self, hard_budgets=None) -> dict[str, TrainConfig]:
        """The three stages' TrainConfigs (``batch_size``: the global batch). The budgeted gates train at
        b ~ U[budget_min, 1] per batch; hard adaptation (``hard_epochs`` epochs) adapts the top-k at b ~
        U[budget_min, 1] too, unless ``hard_budgets`` says otherwise: one budget adapts that budget alone, several
        b ~ U[their minimum, 1]."""
        common = dict(batch_size=self.batch_size, seed=self.seed, gate_lr=self.gate_lr)
        configs = {
            "dense": TrainConfig(objective="dense", epochs=self.dense_epochs, lr=self.dense_lr, **common),
            "budgeted": TrainConfig(objective="budgeted", epochs=self.budgeted_epochs, lr=self.lr,
                                    budget_min=self.budget_min, lambda_cost=self.lambda_cost,
                                    lambda_viol=self.lambda_viol, two_sided=self.two_sided,
                                    gate_start=self.gate_start, gate_start_examples=self.gate_start_examples,
                                    **common),
        }
        if self.hard_epochs:
            budgets = sorted(validate_budget(b) for b in hard_budgets) if hard_budgets else [self.budget_min, 1.0]
            fixed = budgets[0] if len(budgets) == 1 else None
            configs["hard"] = TrainConfig(objective="hard_adapt", epochs=self.hard_epochs, lr=self.lr,
                                          kd_beta=self.kd_beta, kd_temperature=self.kd_temperature, budget=fixed,
                                          budget_min=budgets[0], freeze_gates=True, min_per_layer=1, **common)
        return configs
