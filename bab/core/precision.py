"""Training precision: float32, or bfloat16 autocast for the forward pass and the loss.

``OptimizerConfig.precision = "bfloat16"`` makes ``run_training`` compute each step's forward pass and loss under
``torch.autocast`` with bfloat16 (matrix products in bfloat16, reductions such as softmax and the losses in float32
by torch's autocast policy); the weights, their gradients and AdamW's state stay float32. It pays where the
hardware multiplies bfloat16 natively (AVX-512 BF16 or AMX on CPU, any recent GPU): on a 2-core AVX-512 BF16 CPU one
training step of the quick profile's models ran 1.35-1.75x faster (``python -m bab bench precision``). Without that
support torch emulates it and training gets slower, so ``run_training`` warns.

float32 is the default and what every profile trains with. ``$BAB_PRECISION`` changes the default of every training
config built after it is read (``python -m bab report --precision bfloat16`` sets it for the notebooks' kernels);
a config that names its precision keeps it. bfloat16 trains slightly different weights, so its runs are cached
under their own keys (the precision is a config field, keyed as any other).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from functools import partial

import pandas as pd
import torch

from bab.core.choices import check_choice, choice_from_env

PRECISIONS = ("float32", "bfloat16")
PRECISION_ENV = "BAB_PRECISION"


def check_precision(precision: str, owner: str = "precision") -> None:
    check_choice(precision, PRECISIONS, owner)


def default_precision() -> str:
    """``$BAB_PRECISION`` when set, else float32: the precision of a training config that names none. Read when the
    config is built, so a notebook's profile follows the variable its kernel started with."""
    return choice_from_env(PRECISION_ENV, PRECISIONS, "float32")


def native_bfloat16(device_type: str = "cpu") -> bool:
    """Whether ``device_type`` multiplies bfloat16 matrices in hardware (CPU: AVX-512 BF16 or AMX, as oneDNN
    detects them; CUDA: compute capability 8 or more)."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    # torch has no public name for this test; oneDNN's is the one its bfloat16 CPU kernels dispatch on
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def autocast(precision: str, device_type: str = "cpu") -> contextlib.AbstractContextManager:
    """The context a training step's forward pass and loss run in: nothing for float32, bfloat16 autocast else."""
    check_precision(precision)
    if precision == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16)


def warn_if_emulated(precision: str, device_type: str) -> None:
    if precision == "bfloat16" and not native_bfloat16(device_type):
        warnings.warn(f"precision='bfloat16' on a {device_type} without native bfloat16 matrix products (CPU: "
                      "AVX-512 BF16 or AMX): torch emulates them and training is slower than float32; use "
                      "precision='float32' here", stacklevel=3)


def precision_step_bench(cases: dict[str, tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]],
                         warmup: int = 2, repeats=10) -> pd.DataFrame:
    """``cases``: {name: (model, loss_of(model) -> scalar loss)}. One training step of each (gradients cleared,
    forward and loss, backward; no optimiser step) in float32 and under bfloat16 autocast, interleaved on one thread
    (``bab.core.timing``). One row per case: both medians (ms), the speed-up with its 95% interval over the paired
    repeats, how many repeats, and how far the bfloat16 loss is from the float32 one."""
    from bab.core.timing import single_thread, speedup_columns, time_side_by_side

    def step(model, loss_of, precision):
        model.train().zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with torch.enable_grad():  # the timing protocol runs its callables under no_grad
            with autocast(precision):
                loss = loss_of(model)
            loss.backward()
        return float(loss.detach())

    rows = []
    with single_thread():
        for name, (model, loss_of) in cases.items():
            losses = {p: step(model, loss_of, p) for p in PRECISIONS}
            fns = {p: partial(step, model, loss_of, p) for p in PRECISIONS}
            timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            rows.append({"case": name, **speedup_columns(timing, *PRECISIONS), "float32 loss": losses["float32"],
                         "bfloat16 loss": losses["bfloat16"]})
    return pd.DataFrame(rows)
