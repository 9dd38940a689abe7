"""THE training loop of bab, and what it is made of.

Every method trains through ``run_training``. A method supplies an ``Objective``: which weights learn,
where its batches come from, the loss of one batch and the history row of a span of batches. The loop
owns the rest, the same for every method:

    seed -> Accelerator -> AdamW -> prepare -> schedule -> [step: loss, backward, clip, optimizer, schedule]
         -> history rows (reduced over processes) -> validation and checkpoint selection -> unwrap

Long runs survive interruption: with a ``Checkpointer`` the loop writes a resumable checkpoint (model,
optimizer, schedule, every random state and the data position) every few minutes and on SIGINT / SIGTERM,
and the next identical call resumes from it, ending with the weights, history and random states of an
uninterrupted run.

Every run says early how long it will take, from its first few timed steps, and where no progress bar can
redraw in place (a log file) it prints a plain line every few percent instead (``bab.core.step_clock``).
"""

from __future__ import annotations

import copy
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from bab.core.checkpoints import Checkpointer, StopSignals, random_states, restore_random_states
from bab.core.device import training_device
from bab.core.precision import autocast, check_precision, default_precision, warn_if_emulated
from bab.core.step_clock import StepClock


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)  # one row per epoch, or per ``log_every`` sampled steps
    seconds: float = 0.0  # training time, summed over the sittings of a resumed run
    selected_epoch: int | None = None  # the epoch whose weights were kept (None: the last; 0: the starting weights)
    resumed_at: int | None = None  # the step a resumed run continued from (None: it ran in one sitting)


# -- the pieces ----------------------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_accelerator() -> Accelerator:
    """On ``bab.core.device.training_device()``: the GPU when there is one, unless ``$BAB_DEVICE`` says ``cpu``; on
    CPU the Accelerator is a thin wrapper (the same code runs under ``accelerate launch``)."""
    return Accelerator(cpu=training_device() == "cpu")


def distributed_state() -> PartialState:
    """The process group this process belongs to (one process unless started by ``accelerate launch`` or
    torchrun). Built with the same ``cpu`` flag as ``make_accelerator``: accelerate keeps one shared state per
    process, and a state made first without it would miss the gloo group of CPU processes."""
    return PartialState(cpu=training_device() == "cpu")


def warmup_steps(fraction: float, total: int) -> int:
    return max(1, int(fraction * total))


def warmup_linear_decay(optimizer, total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` steps, then linear decay to zero at step ``total``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / (total - warmup + 1))))


def warmup_cosine(optimizer, total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of the rate at step ``total``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total))))


def frozen_copy(teacher: torch.nn.Module | None, device) -> torch.nn.Module | None:
    """A private, frozen, eval-mode copy of the teacher on ``device`` (the caller's model is left alone)."""
    if teacher is None:
        return None
    return copy.deepcopy(teacher).to(device).eval().requires_grad_(False)


def progress_bar(iterable, desc: str, progress: bool, total: int | None = None, initial: int = 0) -> tqdm:
    """A transient tqdm bar (gone when done) with the running loss in its postfix. Only where it can redraw
    in place: in a terminal or a notebook. Written to a log file, a bar is a stream of carriage returns;
    there the history rows (``log_row``) are the progress."""
    return tqdm(iterable, desc=desc, disable=not (progress and live_output()), leave=False, total=total,
                initial=initial)


def live_output() -> bool:
    """Whether stderr redraws a progress bar in place: a terminal, or a Jupyter kernel (widget bars)."""
    if sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")  # imported by every Jupyter kernel, never imported here for this
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


def log_row(row: dict, progress: bool) -> None:
    """Print one history row above the bar, only in progress mode."""
    if progress:
        tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


# -- what a method supplies -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochBatches:
    """``epochs`` shuffled passes over ``dataset`` in batches of ``batch_size`` (per process); a history row
    per epoch. The shuffle order comes from a generator seeded with the run's seed.

    ``lengths`` (one per example, e.g. its unpadded tokens): batches of similar length, for models that trim
    the padding a batch shares. transformers' ``LengthGroupedSampler``: each pass shuffles, cuts the order into
    mega-batches of up to 50 batches and sorts each by length, so batches stay random but pad far less.
    """

    dataset: Dataset
    batch_size: int
    epochs: int
    lengths: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.lengths is not None and len(self.lengths) != len(self.dataset):
            raise ValueError(f"EpochBatches needs one length per example: {len(self.lengths)} lengths for "
                             f"{len(self.dataset)} examples")


@dataclass(frozen=True)
class SampledBatches:
    """``steps`` batches drawn by ``sample(generator)`` from a generator seeded with the run's seed (e.g. random
    windows of a token stream); a history row every ``log_every`` steps and at the last."""

    sample: Callable[[torch.Generator], tuple]
    steps: int
    log_every: int = 25


@dataclass(frozen=True)
class OptimizerConfig:
    """The optimiser settings every method's training config shares, checked once: AdamW at ``lr`` with
    ``weight_decay``, the learning rate warmed up linearly over ``warmup_fraction`` of the steps and then decayed,
    gradients clipped to norm ``grad_clip`` (0: not clipped), ``batch_size`` examples a step, ``seed`` for the
    batch order and every draw, each step's forward pass and loss in ``precision`` (``bab.core.precision``:
    float32, or bfloat16 autocast where the hardware has it; the default is ``$BAB_PRECISION``'s, else float32).
    The methods' configs extend it with their objectives' options (``bab.heads.train.TrainConfig``,
    ``bab.sparsifiner.train.ViTTrainConfig``, ``bab.context.train.LMTrainConfig``), overriding a default where their
    recipe differs."""

    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    precision: str = field(default_factory=default_precision)

    def __post_init__(self):
        name = type(self).__name__
        check_precision(self.precision, f"{name}.precision")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"{name}.batch_size must be an integer >= 1, got {self.batch_size!r}")
        if not self.lr > 0:
            raise ValueError(f"{name}.lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(f"{name}: weight_decay and grad_clip must be >= 0 (grad_clip 0: no clipping), got "
                             f"{self.weight_decay} and {self.grad_clip}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"{name}.warmup_fraction must lie in [0, 1), got {self.warmup_fraction}")


class Objective:
    """A method's part of training. ``config`` is an ``OptimizerConfig`` (a method's extension of it); ``batches``
    is an ``EpochBatches`` or a ``SampledBatches``."""

    name: str = "train"  # the progress bar's label
    schedule = staticmethod(warmup_linear_decay)
    train_mode: bool = True  # False: the model trains in eval mode (no dropout), e.g. with a frozen backbone

    def __init__(self, config, batches: EpochBatches | SampledBatches):
        self.config, self.batches = config, batches

    def prepare(self, model: torch.nn.Module) -> None:
        """Checks and freezing before the run is seeded (nothing by default)."""

    def parameter_groups(self, model: torch.nn.Module) -> list[dict]:
        """AdamW's parameter groups. Only these parameters learn (and are clipped); the others are frozen for
        the run and get their ``requires_grad`` back at the end."""
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]

    def step(self, model, teacher, batch, rng: random.Random, step: int) -> tuple[torch.Tensor, dict]:
        """The loss of one batch and its additive metrics (summed over a row's batches and processes)."""
        raise NotImplementedError

    def row(self, sums: dict, epoch: int, step: int) -> dict:
        """The history row of summed metrics; ``epoch`` and ``step`` are 1-based counts of the ones finished."""
        raise NotImplementedError


@dataclass(frozen=True)
class Selection:
    """Which weights a run keeps. ``score(model) -> float`` (higher is better, on validation data) is taken
    after every epoch (``each_epoch``) or after the last one only; with ``keep_start`` the starting weights
    are a candidate too, scored before training as epoch 0, and win a tie: an adaptation that does not
    raise the score is not kept."""

    score: Callable[[torch.nn.Module], float]
    keep_start: bool = False
    each_epoch: bool = True


# -- the loop -------------------------------------------------------------------------------------------------


@dataclass
class _Position:
    """Where a run is: optimizer steps done, the epoch under way, batches of it done, and the shuffle
    generator's state when that epoch's pass began (the pass is replayed from it on resume)."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    epoch_start: torch.Tensor | None = None


def run_training(model: torch.nn.Module, objective: Objective, *, teacher: torch.nn.Module | None = None,
                 selection: Selection | None = None, checkpoint: Checkpointer | None = None,
                 progress: bool = True) -> TrainResult:
    """Train ``model`` in place with ``objective``; returns the history and the selected epoch.

    ``teacher``: a model the objective distils from (a private frozen copy is used); ``selection`` picks the
    weights kept.
    ``checkpoint``: write resumable checkpoints there, and resume from one found there.
    """
    config, plan = objective.config, objective.batches
    objective.prepare(model)
    seed_everything(config.seed)
    accelerator = make_accelerator()
    warn_if_emulated(config.precision, accelerator.device.type)
    generator = torch.Generator().manual_seed(config.seed)
    loader = None
    if isinstance(plan, EpochBatches):
        loader = _epoch_loader(plan, _per_process(plan.batch_size, accelerator), generator)
    groups = objective.parameter_groups(model)
    learning = [p for g in groups for p in g["params"]]
    learning_ids = {id(p) for p in learning}
    requires_grad = [(p, p.requires_grad) for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(id(p) in learning_ids)
    clipped = [p for p in model.parameters() if id(p) in learning_ids]  # in the model's order, as the norm sums
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
    if loader is not None:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        epochs, steps_per_epoch = plan.epochs, len(loader)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
        epochs, steps_per_epoch = 1, plan.steps
    total = epochs * steps_per_epoch
    # The schedule counts optimizer steps (each one global batch, however many processes share it) and is
    # stepped once per step: accelerate's prepared scheduler would step N times per step on N processes.
    scheduler = objective.schedule(optimizer, total, warmup_steps(config.warmup_fraction, total))
    teacher = frozen_copy(teacher, accelerator.device)
    rng = random.Random(config.seed)

    result, at, sums, best = TrainResult(), _Position(), {}, None
    if checkpoint is not None:
        checkpoint = checkpoint.for_process(accelerator.process_index, accelerator.num_processes)
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:
        accelerator.unwrap_model(model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        at, sums, best = saved["position"], saved["sums"], saved["best"]
        result.history, result.seconds, result.resumed_at = saved["history"], saved["seconds"], at.step
        print(f"resuming {checkpoint.label} ({objective.name}) at step {at.step}/{total}", file=sys.stderr,
              flush=True)
    elif selection is not None and selection.keep_start:
        unwrapped = accelerator.unwrap_model(model)
        best = _best_of(None, float(selection.score(unwrapped)), 0, unwrapped)
        result.history.append({"epoch": 0, "selection": best[0]})

    sitting_start, last_save, saved_once = time.perf_counter(), time.perf_counter(), False
    step_clock = StepClock(objective.name, total, start_step=at.step, progress=progress, live=live_output())

    def checkpoint_state() -> dict:
        return {"model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "position": copy.deepcopy(at), "sums": dict(sums),
                "best": best, "history": copy.deepcopy(result.history), "random": random_states(rng),
                "generator": generator.get_state(),
                "seconds": result.seconds + time.perf_counter() - sitting_start}

    with StopSignals(active=checkpoint is not None) as stop_signals:
        while at.epoch < epochs:
            model.train(objective.train_mode)
            if at.batch == 0:
                at.epoch_start = generator.get_state()
            batches = _batches(plan, loader, generator, at)
            if saved is not None:  # the pass is replayed up to the checkpoint, then every random state restored
                restore_random_states(saved["random"], rng)
                generator.set_state(saved["generator"])
                saved = None
            bar = progress_bar(batches, f"{objective.name} epoch {at.epoch + 1}/{epochs}" if loader is not None
                               else objective.name, progress, total=steps_per_epoch, initial=at.batch)
            for batch in bar:
                if loader is None:  # a sampled global batch: this process's shard, on its device
                    batch = _shard(batch, accelerator)
                with autocast(config.precision, accelerator.device.type):
                    loss, metrics = objective.step(model, teacher, batch, rng, at.step)
                optimizer.zero_grad(set_to_none=True)
                accelerator.backward(loss)
                if config.grad_clip:
                    accelerator.clip_grad_norm_(clipped, config.grad_clip)
                optimizer.step()
                scheduler.step()
                for key, value in metrics.items():
                    sums[key] = sums.get(key, 0) + value
                loss_value = loss.item()
                bar.set_postfix(loss=f"{loss_value:.3f}")
                at.step, at.batch = at.step + 1, at.batch + 1
                step_clock.tick(at.step, loss_value)
                if _row_due(plan, at, steps_per_epoch):
                    unwrapped = accelerator.unwrap_model(model)
                    row = objective.row(_reduced(accelerator, sums), at.epoch + 1, at.step)
                    sums = {}
                    if selection is not None and (selection.each_epoch or at.step == total):
                        row["selection"] = float(selection.score(unwrapped))
                        best = _best_of(best, row["selection"], at.epoch + 1, unwrapped)
                    result.history.append(row)
                    log_row(row, progress)
                    model.train(objective.train_mode)
                if at.batch == steps_per_epoch:
                    at.epoch, at.batch = at.epoch + 1, 0
                    at.epoch_start = generator.get_state()
                if checkpoint is not None and at.step < total and (
                        stop_signals.received is not None
                        or (checkpoint.every_steps and at.step % checkpoint.every_steps == 0)
                        or time.perf_counter() - last_save >= (checkpoint.every_seconds if saved_once
                                                                else min(checkpoint.first_seconds,
                                                                         checkpoint.every_seconds))):
                    checkpoint.save(checkpoint_state())
                    last_save, saved_once = time.perf_counter(), True
                    if stop_signals.received is not None:
                        stop_signals.stop()
    result.seconds += time.perf_counter() - sitting_start

    model = accelerator.unwrap_model(model)
    # the last step's gradients, a model's worth of memory: a trained model leaves without them, as a loaded one
    model.zero_grad(set_to_none=True)
    for p, flag in requires_grad:
        p.requires_grad_(flag)
    if best is not None:
        model.load_state_dict(best[2])
        result.selected_epoch = best[1]
    model.eval()
    return result


def _batches(plan, loader, generator: torch.Generator, at: _Position):
    """The rest of the current pass: a shuffled epoch replayed from its start (the batches a resumed run had
    done are drawn and skipped, so the shuffle matches), or sampled batches from the generator."""
    if loader is None:
        return (plan.sample(generator) for _ in range(plan.steps - at.batch))
    generator.set_state(at.epoch_start)
    batches = iter(loader)
    for _ in range(at.batch):
        next(batches)
    return batches


def _epoch_loader(plan: EpochBatches, batch_size: int, generator: torch.Generator) -> DataLoader:
    """Shuffled batches of ``plan.dataset``, grouped by length when ``plan.lengths`` is given."""
    if plan.lengths is None:
        return DataLoader(plan.dataset, batch_size=batch_size, shuffle=True, generator=generator)
    from transformers.trainer_pt_utils import LengthGroupedSampler  # imported here: only text runs group

    sampler = LengthGroupedSampler(batch_size, lengths=list(plan.lengths), generator=generator)
    return DataLoader(plan.dataset, batch_size=batch_size, sampler=sampler)


def _per_process(batch_size: int, accelerator: Accelerator) -> int:
    """A global batch's share of each process: N processes follow the optimisation of one."""
    if batch_size % accelerator.num_processes:
        raise ValueError(f"batch size {batch_size} does not split over {accelerator.num_processes} processes; "
                         f"use a multiple of {accelerator.num_processes}")
    return batch_size // accelerator.num_processes


def _shard(batch, accelerator: Accelerator) -> list[torch.Tensor]:
    """This process's contiguous share of a sampled global batch (every process drew the same one)."""
    share = _per_process(len(batch[0]), accelerator)
    start = accelerator.process_index * share
    return [t[start:start + share].to(accelerator.device) for t in batch]


def _row_due(plan, at: _Position, steps_per_epoch: int) -> bool:
    if isinstance(plan, EpochBatches):
        return at.batch == steps_per_epoch
    return at.step % plan.log_every == 0 or at.step == plan.steps


def _reduced(accelerator: Accelerator, sums: dict) -> dict:
    """The row's sums over every process (each saw its own shard of the data)."""
    if accelerator.num_processes == 1:
        return sums
    keys = sorted(sums)
    totals = accelerator.reduce(torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64,
                                             device=accelerator.device), "sum")
    return dict(zip(keys, totals.tolist(), strict=True))


def _best_of(best, score: float, epoch: int, model) -> tuple:
    """(score, epoch, weights) of the best candidate so far; the earlier one wins a tie."""
    if best is None or score > best[0]:
        return score, epoch, copy.deepcopy(model.state_dict())
    return best
