"""The budgeted-heads method's recipe for a user's own data: what ``BudgetedClassifier.fit`` and ``fit heads``
train, stage by stage (``Recipe.train_configs``). The notebooks size their own profiles; tuning one never changes
this recipe."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from bab.core.budget import validate_budget
from bab.heads.train import GateStart, HardAdaptation, TrainConfig


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
    # bab.heads.train.GateStart; its how is one of bab.heads.gates.GATE_STARTS: "flat" (the paper), "random",
    # "ablation", ...
    gate_start: GateStart = GateStart("ablation", examples=128)
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
        if not isinstance(self.gate_start, GateStart):
            example = f"GateStart({self.gate_start!r})" if isinstance(self.gate_start, str) else "GateStart(...)"
            raise ValueError(f"Recipe.gate_start is how the gates start, a bab.heads.train.GateStart: e.g. "
                             f"gate_start={example}; got {self.gate_start!r}")

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
                                    gate_start=self.gate_start, **common),
        }
        if self.hard_epochs:
            budgets = sorted(validate_budget(b) for b in hard_budgets) if hard_budgets else [self.budget_min, 1.0]
            fixed = budgets[0] if len(budgets) == 1 else None
            adaptation = HardAdaptation(kd_beta=self.kd_beta, kd_temperature=self.kd_temperature, freeze_gates=True,
                                        min_per_layer=1)
            configs["hard"] = TrainConfig(objective="hard_adapt", epochs=self.hard_epochs, lr=self.lr,
                                          adaptation=adaptation, budget=fixed, budget_min=budgets[0], **common)
        return configs

    def overridden(self, **overrides) -> Recipe:
        """This recipe with ``overrides`` (its fields); an option of the gate start under its former flat name
        (``gate_start_<option>``) raises, saying the new spelling."""
        for name, value in overrides.items():
            option = name.removeprefix("gate_start_")
            if option != name:
                raise ValueError(f"the recipe option {name} is now an option of gate_start: "
                                 f"gate_start=GateStart(how=..., {option}={value!r}) (bab.heads.train.GateStart)")
        return replace(self, **overrides)

    @classmethod
    def from_dict(cls, saved: dict) -> Recipe:
        """The recipe ``dataclasses.asdict`` wrote (a checkpoint's config.json): ``gate_start`` as a dict, or as written
        before it was nested (a name, with ``gate_start_<option>`` beside it). Fields a newer bab added are left out."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in saved.items() if k in known}
        start = values.get("gate_start")
        if isinstance(start, str):
            flat = {f.name: saved[f"gate_start_{f.name}"] for f in fields(GateStart) if f"gate_start_{f.name}" in saved}
            values["gate_start"] = GateStart(**{"how": start, **flat})
        elif isinstance(start, dict):
            values["gate_start"] = GateStart(**start)
        return cls(**values)
