"""How many CPU threads torch may use: one place for the API, the CLI and the notebooks.

Two torch processes that each take every core slow each other down 5-9x on a 2-core machine, so whoever runs
several at once divides the cores and says so through ``$BAB_THREADS`` (``./run_all.sh --jobs 2`` gives each
notebook one thread). An explicit ``threads=`` / ``--threads`` wins over the variable; without either, torch gets
every core this process may run on.

The thread count is part of a training run's identity. CPU kernels split reductions across threads, so one seed
trains slightly different weights on 1 and on 2 threads (a 4-layer encoder after 15 AdamW steps: 44 of its 55
tensors differ, by up to 5.5e-6; ``python tests/core/thread_effects.py numerics``). ``bab.core.runs.train_cached``
therefore keys every run by the count it trained with, and a notebook prints the count it ran with.
"""

from __future__ import annotations

import os

import torch

THREADS_ENV = "BAB_THREADS"


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform says, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_threads(value, source: str = "threads") -> int:
    """``value`` as a positive thread count, or a ValueError that names ``source`` and how to fix it."""
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit():
            raise ValueError(f"{source} must be a positive whole number of threads, got {value!r} "
                             f"(e.g. 1 or {available_cores()})")
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{source} must be a positive whole number of threads, got {value!r} "
                         f"(e.g. 1 or {available_cores()})")
    return value


def default_threads() -> int:
    """``$BAB_THREADS`` when set, else every available core."""
    env = os.environ.get(THREADS_ENV)
    if env is not None and env.strip():
        return check_threads(env, f"${THREADS_ENV}")
    return available_cores()


def set_threads(threads: int | None = None) -> int:
    """Give torch ``threads`` intra-op threads (None: ``default_threads()``); return the count now in use.

    More threads than available cores is allowed (a user may know better), but never silently chosen."""
    count = default_threads() if threads is None else check_threads(threads)
    torch.set_num_threads(count)
    return count


def apply_threads(threads: int | None = None) -> int:
    """What the API's ``fit(threads=...)`` does: an explicit count or ``$BAB_THREADS`` is set; with neither,
    torch's current setting is left as the caller made it. Returns the count now in use."""
    if threads is None and not os.environ.get(THREADS_ENV, "").strip():
        return torch.get_num_threads()
    return set_threads(threads)


def describe_threads() -> str:
    """"2 threads" / "1 thread": what a log or an estimate says about the current setting."""
    n = torch.get_num_threads()
    return f"{n} thread{'s' if n != 1 else ''}"
