"""Where training runs: ``auto`` (a GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.

``make_accelerator`` (``bab.core.training``) trains on it. ``$BAB_DEVICE`` sets it for a process, and
``python -m bab report --device cuda`` for the notebooks' kernels. Asking for ``cuda`` where torch sees no GPU is an
error that says so, not a quiet run on the CPU; ``cpu`` keeps a GPU machine's training on its CPU.

Evaluations and speed benchmarks run on the CPU whatever the training device: the run cache hands every model back
on the CPU (``bab.core.runs.train_cached``), because the papers' latency protocols, and this package's, time one CPU
thread. A model trained on a GPU sums in another order than one trained on a CPU, so the run cache keys it apart.
"""

from __future__ import annotations

import torch

from bab.core.choices import check_choice, choice_from_env

DEVICES = ("auto", "cpu", "cuda")
DEVICE_ENV = "BAB_DEVICE"


def default_device() -> str:
    """``$BAB_DEVICE`` when set, else ``auto``."""
    return choice_from_env(DEVICE_ENV, DEVICES, "auto")


def training_device(device: str | None = None) -> str:
    """The device training runs on, ``cpu`` or ``cuda``, for ``device`` (default: ``default_device()``). Raises
    when ``cuda`` is asked for and torch sees no GPU."""
    device = default_device() if device is None else device
    check_choice(device, DEVICES, "device")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device 'cuda' was asked for, but torch {torch.__version__} sees no GPU "
                         f"(torch.cuda.is_available() is False): train with device 'cpu' or 'auto' "
                         f"(--device cpu, or unset ${DEVICE_ENV}), or install a CUDA build of torch on a GPU machine")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def device_key() -> dict:
    """What a cached run's key says of where it trained: nothing on the CPU (the keys made before there was a
    choice stay valid), ``{"device": "cuda"}`` on a GPU."""
    device = training_device()
    return {} if device == "cpu" else {"device": device}
