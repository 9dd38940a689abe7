"""What the masked core's fast paths save in training: one Sparsifiner phase-2 step (the dense teacher's forward,
the student's masked forward, CE + token MSE + KL, backward) on notebook 05's ViT, interleaved in one process on
one thread (``bab.core.timing``):

- ``training_step_bench``: the predictor's torch ranking (``selection="torch"``) against the fused kernel's
  (``"auto"``). Both select the same keys, so the step's loss and gradients must be equal bit for bit; the table
  says whether they were.
- ``masked_attention_bench``: the masked softmax over explicit [B, H, n, n] probabilities (what the core runs when
  they are recorded) against ``F.scaled_dot_product_attention`` with the mask (what a training step runs). The
  same arithmetic in another order: equal to float32 rounding, and the table gives the largest difference.
- ``teacher_memo_bench``: the teacher run on the batch against its outputs read back (``train.TeacherMemo``,
  what phase 2's later epochs do); the loss and gradients must be equal bit for bit.

    python -m bab bench sparse --training [--tokens 50 197] [--keep-rates 0.1 0.25 0.5]
"""

from __future__ import annotations

import random
from functools import partial

import pandas as pd
import torch

from bab.core.timing import Repeats, single_thread, speedup_columns, time_side_by_side
from bab.sparsifiner import fused
from bab.sparsifiner.recipe import RECIPE
from bab.sparsifiner.train import TeacherMemo, ViTTrainConfig, _step
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit

# notebook 05's predictor at 197 tokens (its profiles' variant_197): the paper's n_down 32, tau 0.05, top 8 of 32
PREDICTOR_197 = RECIPE.connectivity.replace(n_down=32, tau=0.05, up_prune=1e-2, top_m=8)
PATCH_SIZES = {50: 4, 197: 2}  # 28 x 28 images: 49 or 196 patches and CLS


def phase2_models(tokens: int, seed: int = 0):
    """(student with predictors, dense teacher): notebook 05's ViT at 50 or 197 tokens, random weights."""
    if tokens not in PATCH_SIZES:
        raise ValueError(f"tokens must be one of {sorted(PATCH_SIZES)} (28 x 28 images in 4 x 4 or 2 x 2 patches), "
                         f"got {tokens}")
    shape = dict(RECIPE.model, patch_size=PATCH_SIZES[tokens])
    connectivity = RECIPE.connectivity if tokens == 50 else PREDICTOR_197
    torch.manual_seed(seed)
    student = build_vit(ViTClassifierConfig(**shape, connectivity=connectivity))
    teacher = build_vit(ViTClassifierConfig(**shape)).eval()
    return student, teacher


def phase2_step(student, teacher, pixels, labels, keep_rate: float, selection: str,
                record_probs: bool = False, target: tuple | None = None) -> dict:
    """One phase-2 step at ``keep_rate`` by ``selection`` (``record_probs``: through explicit probabilities;
    ``target``: the teacher's (logits, tokens) instead of running it): {"loss": the loss, name: gradient}
    (gradients cleared first; no optimiser step, so repeats see the same weights)."""
    config = ViTTrainConfig(objective="joint", keep_rates=(keep_rate,))
    student.zero_grad(set_to_none=True)
    with torch.enable_grad():  # the timing protocol runs its callables under no_grad
        _, loss = _step(student, teacher, pixels, labels, config, random.Random(0), selection=selection,
                        record_probs=record_probs, target=target)
        loss.backward()
    return {"loss": loss.detach(), **{n: p.grad.clone() for n, p in student.named_parameters() if p.grad is not None}}


def same_step(a: dict, b: dict) -> bool:
    """Whether two ``phase2_step`` results are equal bit for bit (loss and every gradient)."""
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def largest_difference(a: dict, b: dict) -> float:
    """The largest |a - b| of two ``phase2_step`` results over the loss and every gradient, relative to the
    largest |a| of the same tensor, so gradients of every scale count alike; a tensor whose entries all lie below
    ``NOISE_FLOOR`` of the largest entry anywhere (a gradient that is zero in exact arithmetic, such as the key
    bias's under a softmax, holds only rounding) is measured against that floor instead."""
    if a.keys() != b.keys():
        raise ValueError(f"the two steps have different gradients: {sorted(a.keys() ^ b.keys())}")
    floor = NOISE_FLOOR * max(a[n].abs().max().item() for n in a)
    return max((a[n] - b[n]).abs().max().item() / max(a[n].abs().max().item(), floor, 1e-30) for n in a)


# float32 rounding relative to the largest gradient: entries below it are rounding of an exact zero
NOISE_FLOOR = 1e-6


def _inputs(tokens: int, batch_size: int, seed: int):
    student, teacher = phase2_models(tokens, seed)
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(batch_size, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (batch_size,), generator=generator)
    return student, teacher, pixels, labels


def training_step_bench(tokens=(50, 197), keep_rates=(0.1, 0.25, 0.5), batch_size: int = 128, warmup: int = 1,
                        repeats: int | Repeats = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (tokens, keep rate): the median step time with each selection (ms), the speed-up with its
    interval over the paired repeats, how many repeats were timed (``repeats``: a count, or
    ``bab.core.timing.Repeats`` with a target for that interval), and whether loss and gradients were equal bit
    for bit."""
    if fused.load_extension() is None:
        raise RuntimeError(f"the fused kernel could not be built here ({fused._state['error']!r}), so there is "
                           "nothing to compare: install a C++ compiler and ninja")
    rows = []
    with single_thread():
        for n in tokens:
            student, teacher, pixels, labels = _inputs(n, batch_size, seed)
            for keep in keep_rates:
                equal = same_step(phase2_step(student, teacher, pixels, labels, keep, "torch"),
                                  phase2_step(student, teacher, pixels, labels, keep, "auto"))
                step = partial(phase2_step, student, teacher, pixels, labels, keep)
                fns = {selection: partial(step, selection) for selection in ("torch", "auto")}
                timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
                rows.append({"tokens": n, "keep_rate": keep,
                             **speedup_columns(timing, "torch", "auto", labels=("torch selection", "fused selection")),
                             "same loss and gradients": equal})
    return pd.DataFrame(rows)


def masked_attention_bench(tokens=(50, 197), keep_rates=(0.1, 0.25, 0.5), batch_size: int = 128, warmup: int = 1,
                           repeats: int | Repeats = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (tokens, keep rate): the median step time with the masked softmax over explicit probabilities
    and with the fused one (ms), the speed-up with its interval over the paired repeats, how many repeats were
    timed, and the largest relative difference of loss and gradients between the two (``largest_difference``).
    Both select with the torch ranking, so only the attention differs."""
    rows = []
    with single_thread():
        for n in tokens:
            student, teacher, pixels, labels = _inputs(n, batch_size, seed)
            for keep in keep_rates:
                step = partial(phase2_step, student, teacher, pixels, labels, keep, "torch")
                fns = {"explicit": partial(step, record_probs=True), "fused": partial(step, record_probs=False)}
                difference = largest_difference(fns["explicit"](), fns["fused"]())
                timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
                rows.append({"tokens": n, "keep_rate": keep,
                             **speedup_columns(timing, "explicit", "fused",
                                               labels=("explicit softmax", "fused softmax")),
                             "largest relative difference": difference})
    return pd.DataFrame(rows)


def _from_memo(step, memo: TeacherMemo, pixels, index) -> dict:
    """``step`` with the teacher's outputs read back from ``memo`` (the teacher itself is not needed)."""
    return step(target=memo(None, pixels, index))


def teacher_memo_bench(tokens=(50, 197), keep_rates=(0.1, 0.25, 0.5), batch_size: int = 128, warmup: int = 1,
                       repeats: int | Repeats = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (tokens, keep rate): the median step time with the teacher run on the batch and with its
    outputs read back from a ``TeacherMemo`` filled by the first (ms), the speed-up with its interval, the repeats,
    and whether loss and gradients were equal bit for bit."""
    rows = []
    with single_thread():
        for n in tokens:
            student, teacher, pixels, labels = _inputs(n, batch_size, seed)
            memo, index = TeacherMemo(batch_size), torch.arange(batch_size)
            memo(teacher, pixels, index)
            for keep in keep_rates:
                step = partial(phase2_step, student, teacher, pixels, labels, keep, "auto")
                fns = {"teacher run": step, "teacher memo": partial(_from_memo, step, memo, pixels, index)}
                equal = same_step(fns["teacher run"](), fns["teacher memo"]())
                timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
                rows.append({"tokens": n, "keep_rate": keep, **speedup_columns(timing, "teacher run", "teacher memo"),
                             "same loss and gradients": equal})
    return pd.DataFrame(rows)
