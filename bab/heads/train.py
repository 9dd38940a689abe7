"""The budgeted-heads training loop, specialised by the objective (docs/budgeted-heads.md).

Objectives (equation numbers are those of the budgeted-attention paper):

- ``dense``: cross-entropy, every head.
- ``budgeted``: Eq. 5 (CE + lambda_cost * cost + lambda_viol * max(0, cost - b)^2) with
  b ~ U[budget_min, 1] sampled per batch, soft gates; ``two_sided`` penalises any miss (C - b)^2.
  From scratch or from a dense warm start (copy the dense weights into a gated model first).
  ``gate_start`` (a ``GateStart``) decides how the gates start (``bab.heads.gates.GATE_STARTS``): alike ("flat",
  the paper), or nested so the heads open one after another in order of their importance in the starting model
  (``initialise_gates_``).
- ``static``: Eq. 5 at one fixed budget with budget-free gates (one specialist per budget).
- ``hard_adapt``: Eq. 6; b sampled per batch (or fixed, for a static specialist), the forward
  pass uses the hard top-k mask with a straight-through gradient to the soft gates, distilled
  from a frozen soft-gated teacher at the same budget; its options are ``adaptation`` (a ``HardAdaptation``).
  With ``freeze_gates`` the controller is frozen, so the top-k mask of each budget is fixed and only the
  weights adapt (the paper's pretrained structural adaptation). ``kd_teacher="dense"`` distils from a dense
  teacher instead, ``min_per_layer`` adds a per-layer floor to the top-k; ``budget_choices`` samples b from a
  few values.
- ``recovery``: fine-tune a (structurally pruned) model with distillation from the dense
  teacher (the recovered post-hoc baseline).

The skeleton (seeding, Accelerator, AdamW, warm-up then linear decay, the optimizer step) is
``bab.core.training``'s; the objectives are below the loop.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from bab.core.budget import validate_budget
from bab.core.checkpoints import Checkpointer
from bab.core.losses import budget_loss, distillation_loss
from bab.core.step_clock import StepClock
from bab.core.training import (
    EpochBatches,
    Objective,
    OptimizerConfig,
    Selection,
    TrainResult,
    live_output,
    run_training,
)
from bab.heads.gates import (
    GATE_STARTS,
    head_ablation_importance,
    head_elimination_importance,
    nest_gates_by_importance_,
)

OBJECTIVES = ("dense", "budgeted", "static", "hard_adapt", "recovery")
KD_TEACHERS = ("soft", "dense")


@dataclass(frozen=True)
class GateStart:
    """How the gates of a budgeted or static run start (``TrainConfig.gate_start``, ``initialise_gates_``)."""

    # bab.heads.gates.GATE_STARTS. "flat": theta ~ 0 and slope 1, so g(b) ~ b for every head (the paper); the others
    # nest the gates (``initialise_gates_``)
    how: str = "flat"
    sharpness: float = 4.0  # nested starts: the gates' common slope in logit(b)
    examples: int = 512  # nested importance starts: training examples the head importance is scored on

    def __post_init__(self):
        if self.how not in GATE_STARTS:
            raise ValueError(f"GateStart.how must be one of {GATE_STARTS}, got {self.how!r}")
        if self.sharpness <= 0 or self.examples < 1:
            raise ValueError(f"need GateStart sharpness > 0 and examples >= 1, got {self.sharpness} and "
                             f"{self.examples}")


@dataclass(frozen=True)
class HardAdaptation:
    """The hard adaptation's options (``TrainConfig.adaptation``; Eq. 6, and recovery's distillation)."""

    kd_beta: float = 0.5  # hard_adapt: weight of the distillation term
    kd_temperature: float = 2.0
    kd_teacher: str = "soft"  # hard_adapt: the soft checkpoint at the same budget, or "dense" (every head)
    freeze_gates: bool = False  # hard_adapt: keep the controller (and so each budget's top-k mask) fixed
    min_per_layer: int = 0  # hard_adapt: keep at least this many heads per layer in the top-k (0: global top-k)
    keep_unadapted: bool = True  # hard_adapt with validation selection: the unadapted checkpoint is a candidate

    def __post_init__(self):
        if self.kd_teacher not in KD_TEACHERS:
            raise ValueError(f"HardAdaptation.kd_teacher must be one of {KD_TEACHERS}, got {self.kd_teacher!r}")
        if self.min_per_layer < 0:
            raise ValueError(f"min_per_layer must be >= 0 (0: the global top-k), got {self.min_per_layer}")


@dataclass(frozen=True)
class TrainConfig(OptimizerConfig):
    """A budgeted-heads training step: the objective (``OBJECTIVES``; the module docstring), its epochs and the
    gates' learning rate, the budget terms of Eq. 5, the hard adaptation's distillation (Eq. 6, ``adaptation``) and
    how the gates start (``gate_start``); each option names the objectives it applies to. The optimiser settings
    are ``OptimizerConfig``'s."""

    objective: str = "dense"
    epochs: int = 1
    gate_lr: float = 1e-2  # gates (two numbers per head) need far bigger steps than the weights
    budget: float | None = None  # static: the specialist's budget; hard_adapt: a fixed budget instead of sampling
    budget_min: float = 0.1  # budgeted / hard_adapt: b ~ U[budget_min, 1]
    lambda_cost: float = 0.0
    lambda_viol: float = 0.0
    adaptation: HardAdaptation = HardAdaptation()  # hard_adapt (and recovery's distillation): Eq. 6's options
    budget_choices: tuple[float, ...] | None = None  # budgeted / hard_adapt: b drawn from these, not U[budget_min, 1]
    two_sided: bool = False  # budgeted / static: lambda_viol * (C - b)^2 instead of max(0, C - b)^2
    gate_start: GateStart = GateStart()  # budgeted / static: how the gates start
    # batches of texts of similar length (bab.core.training.EpochBatches): the same examples each epoch, far less
    # padding for models that trim it (AG News at length 128: 40 tokens an example instead of 82)
    group_by_length: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"TrainConfig.objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.gate_lr <= 0:
            raise ValueError(f"TrainConfig.gate_lr must be > 0, got {self.gate_lr}")
        if self.objective == "static" and self.budget is None:
            raise ValueError("TrainConfig(objective='static') needs budget=<the fixed budget in (0, 1]>")
        if self.budget is not None:
            if self.objective not in ("static", "hard_adapt"):
                raise ValueError(
                    f"TrainConfig.budget is only for objective='static' or 'hard_adapt' (got {self.objective!r})"
                )
            validate_budget(self.budget)
        validate_budget(self.budget_min)
        if self.lambda_cost < 0 or self.lambda_viol < 0:
            raise ValueError("lambda_cost and lambda_viol must be >= 0")
        self._check_recipe_options()

    def _check_recipe_options(self) -> None:
        for name, cls in (("gate_start", GateStart), ("adaptation", HardAdaptation)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                example = f"GateStart(how={value!r})" if isinstance(value, str) else f"{cls.__name__}(...)"
                raise TypeError(f"TrainConfig.{name} must be a {cls.__name__}, e.g. {name}={example}; got {value!r}")
        if self.gate_start.how != "flat" and self.objective not in ("budgeted", "static"):
            raise ValueError(f"gate_start=GateStart(how={self.gate_start.how!r}) initialises the gates of a budgeted "
                             f"or static run; objective {self.objective!r} starts from its parent's gates, leave "
                             f"gate_start=GateStart(how='flat')")
        if self.budget_choices is not None:
            if not isinstance(self.budget_choices, tuple) or not self.budget_choices:
                raise ValueError(f"budget_choices must be a non-empty tuple of budgets, e.g. (0.25, 0.5, 0.75), "
                                 f"got {self.budget_choices!r}")
            for b in self.budget_choices:
                validate_budget(b)
            if self.budget is not None:
                raise ValueError("give either budget (one fixed budget) or budget_choices, not both")

    def ranked_on(self, examples: int) -> TrainConfig:
        """This step with its gate start's head importance scored on ``examples`` training examples (a nested start's
        cost: one pass over them per ranking step, ``ranking_passes``)."""
        return replace(self, gate_start=replace(self.gate_start, examples=examples))


class HeadsObjective(Objective):
    """One budgeted-heads objective (the module docstring): which weights learn, the loss of one batch and the
    epoch's row (mean loss, training accuracy and cost per example)."""

    def __init__(self, config: TrainConfig, train_data: Dataset, pad_id: int | None = None, progress: bool = False):
        self.progress = progress  # the gate start's ranking of heads says how long it takes
        lengths = None
        if config.group_by_length:
            if pad_id is None:
                raise ValueError("TrainConfig(group_by_length=True) needs a model whose config has a pad_id "
                                 "(texts padded with it); leave group_by_length=False for other data")
            lengths = tuple(int(train_data[i][0].ne(pad_id).sum()) for i in range(len(train_data)))
        super().__init__(config, EpochBatches(train_data, config.batch_size, config.epochs, lengths=lengths))
        self.name = config.objective
        self.train_data = train_data

    def prepare(self, model) -> None:
        config = self.config
        if config.adaptation.freeze_gates and getattr(model, "gates", None) is not None:
            model.gates.requires_grad_(False)
        if config.objective == "hard_adapt":
            # the floor training uses is the one evaluation uses
            model.min_per_layer = config.adaptation.min_per_layer
        if config.gate_start.how != "flat":
            initialise_gates_(model, self.train_data, config, progress=self.progress)

    def parameter_groups(self, model) -> list[dict]:
        return parameter_groups(model, self.config)

    def step(self, model, teacher, batch, rng, step):
        input_ids, labels = batch
        out, loss = _objective_step(model, teacher, input_ids, labels, _step_budget(self.config, rng), self.config)
        n = labels.numel()
        return loss, {"loss": loss.item() * n, "correct": (out.logits.argmax(-1) == labels).sum().item(),
                      "seen": n, "cost": out.cost.item() * n}

    def row(self, sums, epoch, step):
        return {"epoch": epoch, "loss": sums["loss"] / sums["seen"],
                "train_accuracy": 100.0 * sums["correct"] / sums["seen"], "cost": sums["cost"] / sums["seen"]}


def train(model: torch.nn.Module, train_data: Dataset, config: TrainConfig, teacher: torch.nn.Module | None = None,
          progress: bool = True, select=None, checkpoint: Checkpointer | None = None) -> TrainResult:
    """Train ``model`` in place (``bab.core.training.run_training``). ``teacher`` (a soft-gated model, or the
    dense one) is required for hard_adapt and recovery.

    ``select(model) -> float`` (optional, higher is better, computed on validation data) picks the checkpoint:
    the best epoch's weights are restored at the end. For hard adaptation the unadapted checkpoint is a candidate
    too (``selected_epoch`` 0: adaptation was not kept). ``checkpoint``: resumable checkpoints are written there,
    and a run found there is resumed.
    """
    _check_objective(model, config, teacher)
    selection = None
    if select is not None:
        selection = Selection(select, keep_start=config.objective == "hard_adapt"
                              and config.adaptation.keep_unadapted)
    objective = HeadsObjective(config, train_data, pad_id=getattr(getattr(model, "config", None), "pad_id", None),
                               progress=progress)
    return run_training(model, objective, teacher=teacher, selection=selection,
                        checkpoint=checkpoint, progress=progress)


def _check_objective(model, config: TrainConfig, teacher) -> None:
    if config.objective in ("budgeted", "static", "hard_adapt") and getattr(model, "gates", None) is None:
        raise ValueError(f"objective {config.objective!r} needs a model with gates (EncoderConfig.gates)")
    if config.objective == "static" and model.config.gates != "static":
        raise ValueError("objective 'static' needs a model built with gates='static'")
    if config.objective == "hard_adapt" and teacher is None:
        raise ValueError("objective 'hard_adapt' needs teacher=<the frozen soft-gated checkpoint>")
    if config.objective == "recovery" and teacher is None:
        raise ValueError("objective 'recovery' needs teacher=<the dense model>")


def parameter_groups(model: torch.nn.Module, config: TrainConfig) -> list[dict]:
    """Weights at ``lr`` with weight decay; gate parameters at ``gate_lr`` without decay."""
    gates, weights = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (gates if name.startswith("gates.") else weights).append(param)
    groups = [{"params": weights}]
    if gates:
        groups.append({"params": gates, "lr": config.gate_lr, "weight_decay": 0.0})
    return groups


def _step_budget(config: TrainConfig, rng: random.Random) -> float | None:
    if config.objective == "dense":
        return None
    if config.budget is not None:  # static, or hard adaptation of one specialist
        return config.budget
    if config.budget_choices is not None:
        return rng.choice(config.budget_choices)
    return rng.uniform(config.budget_min, 1.0)


def _objective_step(model, teacher, input_ids, labels, budget, config: TrainConfig):
    if config.objective == "dense":
        out = model(input_ids, mode="dense")
        return out, F.cross_entropy(out.logits, labels)
    if config.objective in ("budgeted", "static"):
        out = model(input_ids, budget=budget, mode="soft")
        return out, budget_loss(out.logits, labels, out.cost, budget, config.lambda_cost, config.lambda_viol,
                                two_sided=config.two_sided)
    if config.objective == "recovery":
        with torch.no_grad():
            teacher_logits = teacher(input_ids, mode="dense").logits
        out = model(input_ids, mode="dense")
        return out, distillation_loss(out.logits, teacher_logits, labels, config.adaptation.kd_beta,
                                   config.adaptation.kd_temperature)
    # hard_adapt (Eq. 6)
    with torch.no_grad():
        if config.adaptation.kd_teacher == "dense":
            teacher_logits = teacher(input_ids, mode="dense").logits
        else:
            teacher_logits = teacher(input_ids, budget=budget, mode="soft").logits
    out = model(input_ids, budget=budget, mode="hard")
    return out, distillation_loss(out.logits, teacher_logits, labels, config.adaptation.kd_beta,
                                   config.adaptation.kd_temperature)


# -- how the gates start ------------------------------------------------------------------------------------


def initialise_gates_(model: torch.nn.Module, train_data: Dataset, config: TrainConfig,
                      progress: bool = False) -> torch.Tensor:
    """Start ``model``'s gates nested (``bab.heads.gates.nest_gates_by_importance_``) in the order
    ``config.gate_start.how`` names, scored on the first ``config.gate_start.examples`` training examples with the
    model's current weights (after the warm start). Returns the importance [L, H] used.

    Why: with flat gates g(b) ~ b for every head, the soft cost is met by shrinking every head alike and
    the hard top-k later picks heads almost at random; nested gates commit to an order from the start, so
    the top-k sets of all budgets are nested and the soft model trains on them.
    """
    num_layers, num_heads = model.gates.theta.shape
    start = config.gate_start
    if start.how == "random":  # the same spread without the order: does the order matter?
        generator = torch.Generator().manual_seed(config.seed)
        importance = torch.rand(num_layers, num_heads, generator=generator)
    else:
        importance = _scored_importance(model, train_data, start.how, start.examples, progress)
    nest_gates_by_importance_(model.gates, importance, start.sharpness, budget=config.budget)
    return importance


# The warm-start budgeted model and every static specialist start from the same dense weights and data, so their
# head importance is the same: computed once per process (keyed by the weights, the examples and the method).
_IMPORTANCE_MEMO: dict[str, torch.Tensor] = {}


def _scored_importance(model, train_data: Dataset, method: str, num_examples: int,
                       progress: bool = False) -> torch.Tensor:
    num_layers, num_heads = model.gates.theta.shape
    loss_with_mask = masked_loss_on(model, train_data, num_examples)
    key = _fingerprint(model, loss_with_mask.batches, method)
    if key not in _IMPORTANCE_MEMO:
        score = head_elimination_importance if method == "elimination" else head_ablation_importance
        _IMPORTANCE_MEMO[key] = score(_timed(loss_with_mask, method, num_layers * num_heads, progress),
                                      num_layers, num_heads)
    return _IMPORTANCE_MEMO[key].clone()


def ranking_passes(method: str, heads: int) -> int:
    """How many masked-loss passes ranking ``heads`` heads takes: one per head and one with all for "ablation";
    for "elimination", every head still in at each step of the greedy elimination (heads + ... + 2)."""
    return heads * (heads + 1) // 2 - 1 if method == "elimination" else heads + 1


def _timed(loss_with_mask, method: str, heads: int, progress: bool):
    """``loss_with_mask`` ticking a ``StepClock`` after each pass, so a ranking that takes minutes says how long
    (an estimate after the first passes; on a log, a line every 5% of them)."""
    clock = StepClock(f"gate start ({method})", ranking_passes(method, heads), progress=progress,
                      live=live_output(), unit="pass")
    done = [0]

    def counted(mask: torch.Tensor) -> float:
        loss = loss_with_mask(mask)
        done[0] += 1
        clock.tick(done[0])
        return loss

    return counted


def _fingerprint(model, batches, method: str) -> str:
    """A digest of everything the importance depends on: the non-gate weights, the scored examples, the method."""
    digest = hashlib.sha256(method.encode())
    for name, tensor in sorted(model.state_dict().items()):
        if not name.startswith("gates."):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    for ids, labels in batches:
        digest.update(ids.cpu().numpy().tobytes())
        digest.update(labels.cpu().numpy().tobytes())
    return digest.hexdigest()


def masked_loss_on(model: torch.nn.Module, data: Dataset, num_examples: int, batch_size: int = 256):
    """``loss_with_mask(mask [L, H]) -> float``: ``model``'s mean cross-entropy on the first ``num_examples``
    of ``data`` with only the heads of the binary ``mask`` (hard mode, explicit mask; eval mode)."""
    device = next(model.parameters()).device
    subset = Subset(data, range(min(num_examples, len(data))))
    batches = [(ids.to(device), y.to(device)) for ids, y in DataLoader(subset, batch_size=batch_size)]
    count = len(subset)

    @torch.no_grad()
    def loss_with_mask(mask: torch.Tensor) -> float:
        was_training = model.training
        model.eval()
        total = sum(F.cross_entropy(model(ids, mode="hard", head_mask=mask.to(device)).logits, y,
                                    reduction="sum").item() for ids, y in batches)
        model.train(was_training)
        return total / count

    loss_with_mask.batches = batches
    return loss_with_mask
