"""The language-model training loop: dense pretraining and context-pruning fine-tuning (docs/context-pruning.md).

Objectives:

- ``lm``: next-token cross-entropy, plain GPT-2 (the interactions, if any, are not used).
- ``context_pruning``: CE + gamma * mean keep mass (or the official code's average of I,
  ``sparsity_normalisation``), alpha on a cosine schedule 1 -> 8 over the
  steps, the whole model fine-tuned (the interaction parameters at a larger learning rate).
- ``freeze_pretrained=True`` (with a pruning objective): only the interaction modules train, the
  pretrained weights stay as loaded (notebook 07's quick profile: SmolLM2 on 2 CPU cores; the
  backward pass still runs through the frozen layers, but no weight gradients or optimizer state).
- ``attn_mask`` (``train_lm``'s argument, objective ``lm`` only): a static pattern (bab.context.static_masks) applied
  to every training window as it is at evaluation, so a static baseline is fine-tuned under its own mask with the
  learned model's recipe (docs/context-pruning.md, "Static baselines at equal sparsity").
- ``budget_context`` (beyond the paper): a budget-conditioned model; per step a keep budget
  b ~ U[budget_min, budget_max] and Eq. 5 of the budgeted-attention paper with the keep mass as
  the cost: CE + lambda_cost * keep + lambda_viol * max(0, keep - b)^2, or with ``two_sided``
  lambda_viol * (keep - b)^2, so the delivered keep fraction tracks b from both sides.

Batches are random windows of ``context + 1`` tokens from the training stream (nanoGPT style),
drawn from a seeded generator, so a run is reproducible with one thread. The schedule is linear
warm-up then cosine decay to 10%; the skeleton is ``bab.core.training``'s.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from bab.context.attach import context_state
from bab.context.interaction import SPARSITY_NORMALISATIONS, cosine_alpha
from bab.context.lm import check_length, lm_forward, prunes, pruning_parameters
from bab.core.budget import validate_budget
from bab.core.checkpoints import Checkpointer
from bab.core.losses import budget_loss, context_pruning_loss, next_token_ce
from bab.core.training import Objective, OptimizerConfig, SampledBatches, TrainResult, run_training, warmup_cosine

LM_OBJECTIVES = ("lm", "context_pruning", "budget_context")


@dataclass(frozen=True)
class LMTrainConfig(OptimizerConfig):
    """A decoder training step: the objective (``LM_OBJECTIVES``), its steps and window length, the interaction
    modules' learning rate, the keep-mass weight and α schedule of context pruning, and the budget terms of the
    budget-conditioned objective; the optimiser settings are ``OptimizerConfig``'s."""

    batch_size: int = 16
    objective: str = "lm"
    steps: int = 200
    context: int = 128
    pruning_lr: float = 1e-2  # interaction query/key/bias: a fresh module, bigger steps than the pretrained weights
    gamma: float = 0.0  # context_pruning: weight of the keep mass
    alpha_start: float = 1.0
    alpha_end: float = 8.0
    budget_min: float = 0.1  # budget_context: b ~ U[budget_min, budget_max]
    budget_max: float = 0.9
    lambda_cost: float = 0.0
    lambda_viol: float = 50.0
    freeze_pretrained: bool = False  # train only the interaction modules (the pretrained weights stay fixed)
    # budget_context: also penalise keeping less than asked, lambda_viol * (keep - b)^2. Cross-entropy alone pulls the
    # keep mass up too weakly: with the one-sided term the 06 quick checkpoint kept <= 26% at every budget.
    two_sided: bool = False
    # context_pruning: how the sparsity term averages I, "causal_pairs" (the fraction of context kept, the paper's
    # text) or "official" (the official code's, half the weight per pair: bab.context.interaction.sparsity_term)
    sparsity_normalisation: str = "causal_pairs"

    def __post_init__(self):
        super().__post_init__()
        if self.objective not in LM_OBJECTIVES:
            raise ValueError(f"LMTrainConfig.objective must be one of {LM_OBJECTIVES}, got {self.objective!r}")
        if min(self.steps, self.context) < 1:
            raise ValueError("steps and context must be >= 1")
        if self.pruning_lr <= 0:
            raise ValueError("pruning_lr must be > 0")
        if self.gamma < 0 or self.lambda_cost < 0 or self.lambda_viol < 0:
            raise ValueError("gamma, lambda_cost and lambda_viol must be >= 0")
        if not 1.0 <= self.alpha_start <= self.alpha_end < math.inf:
            raise ValueError(f"need 1 <= alpha_start <= alpha_end < inf, got {self.alpha_start}, {self.alpha_end}")
        if self.sparsity_normalisation not in SPARSITY_NORMALISATIONS:
            raise ValueError(f"LMTrainConfig.sparsity_normalisation must be one of {SPARSITY_NORMALISATIONS}, got "
                             f"{self.sparsity_normalisation!r}")
        if self.sparsity_normalisation != "causal_pairs" and self.objective != "context_pruning":
            raise ValueError("sparsity_normalisation applies to the 'context_pruning' objective only (the budgeted "
                             "objective compares the fraction of context kept with the budget, 'causal_pairs')")
        validate_budget(self.budget_min)
        validate_budget(self.budget_max)
        if self.budget_min > self.budget_max:
            raise ValueError("budget_min must be <= budget_max")
        if self.freeze_pretrained and self.objective == "lm":
            raise ValueError("freeze_pretrained=True leaves only the interaction modules to train, which the 'lm' "
                             "objective never uses; use objective 'context_pruning' or 'budget_context'")


def random_batch(ids: torch.Tensor, batch_size: int, context: int, generator: torch.Generator):
    """Random windows of the stream ids [N]: (inputs [B, context], targets [B, context])."""
    if len(ids) <= context + 1:
        raise ValueError(f"a stream of {len(ids)} tokens is too short for windows of {context} + 1 tokens")
    starts = torch.randint(0, len(ids) - context - 1, (batch_size,), generator=generator)
    window = starts[:, None] + torch.arange(context + 1)
    chunk = ids[window]
    return chunk[:, :-1], chunk[:, 1:]


class LMObjective(Objective):
    """One language-model objective (the module docstring): random windows of the token stream, the loss of one
    batch, and a row every ``log_every`` steps with the means of loss, cross-entropy and keep mass over them."""

    schedule = staticmethod(warmup_cosine)

    def __init__(self, config: LMTrainConfig, train_ids: torch.Tensor, log_every: int,
                 attn_mask: torch.Tensor | None = None):
        super().__init__(config, SampledBatches(
            lambda generator: random_batch(train_ids, config.batch_size, config.context, generator),
            config.steps, log_every))
        self.name = config.objective
        if attn_mask is not None:
            if config.objective != "lm":
                raise ValueError(f"a static attn_mask trains the plain decoder under a fixed pattern (objective "
                                 f"'lm'); objective {config.objective!r} prunes by learned decisions instead")
            if attn_mask.dtype != torch.bool or tuple(attn_mask.shape) != (config.context, config.context):
                raise ValueError(f"attn_mask must be bool [context, context] = [{config.context}, {config.context}], "
                                 f"got {attn_mask.dtype} {tuple(attn_mask.shape)}; build it with "
                                 "bab.context.static_masks at the training context")
        self.attn_mask = attn_mask

    def prepare(self, model) -> None:
        config = self.config
        if config.objective != "lm" and not prunes(model):
            raise ValueError(f"objective {config.objective!r} needs a model with context pruning attached "
                             "(bab.context.attach.attach(model, PruningConfig(...)))")
        if config.objective == "budget_context" and not context_state(model).pruning.budget_conditioned:
            raise ValueError("objective 'budget_context' needs PruningConfig(budget_conditioned=True)")
        check_length(model, config.context)
        if config.freeze_pretrained:
            for name, parameter in model.named_parameters():
                parameter.requires_grad_(".interaction." in name)

    def parameter_groups(self, model) -> list[dict]:
        return parameter_groups(model, self.config)

    def alpha(self, step: int) -> float:
        return cosine_alpha(step, self.config.steps, self.config.alpha_start, self.config.alpha_end)

    def step(self, model, teacher, batch, rng, step):
        x, y = batch
        out, loss, ce = _objective_step(model, x, y, self.alpha(step), self.config, rng, self.attn_mask)
        keep = out.keep_mass.item() if out.keep_mass is not None else 1.0
        return loss, {"loss": loss.item(), "ce": ce.item(), "keep": keep, "n": 1}

    def row(self, sums, epoch, step):
        n = sums["n"]
        return {"step": step, "loss": sums["loss"] / n, "train_ce": sums["ce"] / n, "keep_mass": sums["keep"] / n,
                "alpha": None if self.config.objective == "lm" else self.alpha(step - 1)}


def train_lm(model, train_ids: torch.Tensor, config: LMTrainConfig, progress: bool = True, log_every: int = 25,
             checkpoint: Checkpointer | None = None, attn_mask: torch.Tensor | None = None) -> TrainResult:
    """Train ``model`` (a decoder with optional context pruning) in place on the token stream ``train_ids``
    (``bab.core.training.run_training``). ``config.batch_size`` is the global batch: under ``accelerate launch``
    each process takes its share of every batch.

    ``history`` gets one row every ``log_every`` steps (and at the last), with means over those steps.
    ``checkpoint``: resumable checkpoints are written there, and a run found there is resumed.
    ``attn_mask`` [context, context] bool (objective ``lm``): a static pattern every training window attends under
    (``lm_forward``'s), so no masked (query, key) pair enters the loss.
    """
    return run_training(model, LMObjective(config, train_ids, log_every, attn_mask), checkpoint=checkpoint,
                        progress=progress)


def parameter_groups(model, config: LMTrainConfig) -> list[dict]:
    """The pretrained weights at ``lr``; the interaction parameters (fresh modules) at ``pruning_lr`` without
    decay when the objective prunes, else they are left out (the ``lm`` objective never uses them)."""
    pruning = [p for _, p in pruning_parameters(model)]
    pruning_ids = {id(p) for p in pruning}
    groups = []
    pretrained = [p for p in model.parameters() if id(p) not in pruning_ids and p.requires_grad]
    if pretrained:  # empty with freeze_pretrained
        groups.append({"params": pretrained})
    if config.objective != "lm" and pruning:
        groups.append({"params": pruning, "lr": config.pruning_lr, "weight_decay": 0.0})
    return groups


def _objective_step(model, x, y, alpha: float, config: LMTrainConfig, budget_rng: random.Random,
                    attn_mask: torch.Tensor | None = None):
    """The forward pass, loss and next-token CE (the loss's CE part, computed once) of one batch:
    ``(output, loss, ce)``; ``attn_mask``: the static pattern of the ``lm`` objective, if any."""
    if config.objective == "lm":
        out = lm_forward(model, x, prune=False, attn_mask=None if attn_mask is None else attn_mask.to(x.device))
        ce = next_token_ce(out.logits, y)
        return out, ce, ce
    if config.objective == "context_pruning":
        out = lm_forward(model, x, alpha=alpha, sparsity_normalisation=config.sparsity_normalisation)
        ce = next_token_ce(out.logits, y)
        return out, context_pruning_loss(out.logits, y, out.sparsity, config.gamma, ce=ce), ce
    budget = budget_rng.uniform(config.budget_min, config.budget_max)  # budget_context
    out = lm_forward(model, x, alpha=alpha, budget=budget)
    ce = next_token_ce(out.logits, y)
    return out, budget_loss(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1), out.keep_mass, budget,
                            config.lambda_cost, config.lambda_viol, two_sided=config.two_sided, ce=ce), ce
