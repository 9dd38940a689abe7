"""What every training loop in bab shares: seeding, the Accelerator, the warm-up schedules, one optimizer
step, the progress bar and the result record.

Each method keeps its own loop and objective (``bab.heads.train``, ``bab.context.train``,
``bab.sparsifiner.train``); these helpers are the skeleton they repeat, so a loop reads top to bottom:
seed -> Accelerator -> AdamW -> schedule -> prepare -> step ... -> unwrap.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass, field

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from tqdm.auto import tqdm


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)  # one row per epoch (per ``log_every`` steps for the LM)
    seconds: float = 0.0
    selected_epoch: int | None = None  # the epoch whose weights were kept (None: the last)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_accelerator() -> Accelerator:
    """The GPU when there is one; on CPU the Accelerator is a thin wrapper (the same code runs under
    ``accelerate launch``)."""
    return Accelerator(cpu=not torch.cuda.is_available())


def distributed_state() -> PartialState:
    """The process group this process belongs to (one process unless started by ``accelerate launch`` or
    torchrun). Built with the same ``cpu`` flag as ``make_accelerator``: accelerate keeps one shared state per
    process, and a state made first without it would miss the gloo group of CPU processes."""
    return PartialState(cpu=not torch.cuda.is_available())


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


def optimizer_step(accelerator: Accelerator, loss: torch.Tensor, optimizer, scheduler, clip_params,
                   grad_clip: float) -> None:
    """zero_grad, backward, clip ``clip_params`` to norm ``grad_clip`` (0: no clipping), step, schedule."""
    optimizer.zero_grad(set_to_none=True)
    accelerator.backward(loss)
    if grad_clip:
        accelerator.clip_grad_norm_(clip_params, grad_clip)
    optimizer.step()
    scheduler.step()


def frozen_copy(teacher: torch.nn.Module | None, device) -> torch.nn.Module | None:
    """A private, frozen, eval-mode copy of the teacher on ``device`` (the caller's model is left alone)."""
    if teacher is None:
        return None
    return copy.deepcopy(teacher).to(device).eval().requires_grad_(False)


def progress_bar(iterable, desc: str, progress: bool) -> tqdm:
    """A transient tqdm bar (gone when done); the loops put the running loss in its postfix."""
    return tqdm(iterable, desc=desc, disable=not progress, leave=False)


def log_row(row: dict, progress: bool) -> None:
    """Print one history row above the bar, only in progress mode."""
    if progress:
        tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
