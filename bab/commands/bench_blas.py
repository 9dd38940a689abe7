"""``bench blas``: MKL's AVX2 kernels against its AVX-512 ones on an AMD CPU (``bab.core.blas``), on matrix products
and one training step of each notebook's model at its quick shape.

    python -m bab bench blas [--only 03,05,07] [--repeats 7]

A process cannot switch MKL's kernels once torch is loaded, so two worker processes (one with MKL's vendor check
left alone, one with it answered) build the same cases with the same seeds and time one round at a time, taking
turns: round i of both is timed back to back, one thread, after the warm-up, and the speed-up is the ratio of the
medians with its 95% interval over the paired rounds, as every bench computes it. Beside it: each step's loss (each
product's first entry) both ways, the same float32 arithmetic summed in another order.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bab.commands.common import DefaultsFormatter, add_repeat_arguments, print_table
from bab.commands.quick_cases import PRECISION_CASES as CASES
from bab.commands.quick_cases import chosen_cases
from bab.core.errors import checking

VARIANTS = {"AVX2": "0", "AVX-512": "1"}  # the kernels MKL runs -> $BAB_MKL_VENDOR_SHIM
GEMMS = {"matrix product 2048 x 2048 x 2048": (2048, 2048, 2048),
         "matrix product 200 x 576 x 1536 (SmolLM2's MLP, 200 tokens)": (200, 576, 1536)}


def add_bench_blas(sub) -> None:
    p = sub.add_parser("blas", help="MKL's AVX2 vs AVX-512 kernels on an AMD CPU (bab.core.blas)",
                       formatter_class=DefaultsFormatter,
                       description="Matrix products and one training step of each notebook's model at its quick "
                                   "shape, with MKL's AVX2 kernels (its choice on an AMD CPU) against its AVX-512 "
                                   "ones, in two worker processes taking turns, one thread each.")
    p.add_argument("--only", default=",".join(CASES), help=f"comma-separated notebooks among {', '.join(CASES)}")
    p.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)  # one of the two timing processes
    add_repeat_arguments(p, warmup=2, repeats=7)
    p.set_defaults(run=_bench_blas)


def _bench_blas(args) -> int:
    if args.worker:
        return _worker(args)
    table = blas_bench(args.only, args.warmup, args.repeats)
    print_table(f"MKL's AVX2 kernels (its choice on this AMD CPU) against its AVX-512 ones (bab.core.blas); one thread "
                f"each, two worker processes taking turns, median of {args.repeats} rounds after {args.warmup} warm-up",
                table, "speed-up = AVX2 time / AVX-512 time, 95% interval over the paired rounds; result: a step's "
                "float32 loss, a product's first entry, each way (the same arithmetic summed in another order)")
    return 0


def blas_bench(only: str, warmup: int = 2, repeats: int = 7):
    """One row per case (``GEMMS`` and a training step of each notebook in ``only``): both medians (ms), the speed-up
    with its 95% interval over the paired rounds, and each variant's result."""
    preload = check_blas_bench(only, repeats)
    workers = {name: _start(name, only, warmup, preload if name == "AVX-512" else {}) for name in VARIANTS}
    try:
        ready = {name: _read(worker) for name, worker in workers.items()}
        for name, state in ready.items():
            if state["active"] != (name == "AVX-512"):
                raise RuntimeError(f"the {name} worker did not run the kernels it was started for: {state}")
        times = {name: {case: [] for case in ready[name]["losses"]} for name in VARIANTS}
        for i in range(repeats):
            for name in (list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))):
                workers[name].stdin.write("time\n")
                workers[name].stdin.flush()
                for case, ms in _read(workers[name]).items():
                    times[name][case].append(ms)
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.stdin.close()
                worker.wait(timeout=60)
    return _table(times, {name: state["losses"] for name, state in ready.items()})


def check_blas_bench(only: str, repeats: int) -> dict:
    """Refuse what leaves nothing to compare, before any worker starts (``BadInput``); the AVX-512 worker's
    ``LD_PRELOAD`` otherwise (the library built where it was not yet)."""
    from bab.core.blas import preload_env, wants_vendor_shim

    with checking():
        chosen_cases(only)
        if repeats < 2:
            raise ValueError(f"an interval needs at least 2 rounds: --repeats must be >= 2, got {repeats}")
        if os.environ.get("MKL_CBWR"):
            raise ValueError(f"$MKL_CBWR={os.environ['MKL_CBWR']} pins MKL's code branch, so both workers would run "
                             "the same kernels: unset it to compare them")
        if not wants_vendor_shim():
            raise ValueError("this is not an AMD x86-64 CPU with AVX-512 (or $BAB_MKL_VENDOR_SHIM=0): MKL already "
                             "runs the kernels it would run with the shim, so there is nothing to compare")
        preload = preload_env()
        if not preload:
            raise ValueError("the shim could not be built (bab.core.blas needs a C compiler, cc): install one")
    return preload


def _table(times: dict, losses: dict):
    import pandas as pd

    from bab.core.statistics import ratio_of_medians

    rows = []
    for case in times["AVX2"]:
        before, after = times["AVX2"][case], times["AVX-512"][case]
        speed_up = ratio_of_medians(before, after, "paired rounds")
        rows.append({"case": case, "AVX2 ms": _median(before), "AVX-512 ms": _median(after),
                     "speed-up": speed_up.value, "speed-up low": speed_up.low, "speed-up high": speed_up.high,
                     "AVX2 result": losses["AVX2"][case], "AVX-512 result": losses["AVX-512"][case]})
    return pd.DataFrame(rows)


def _median(values) -> float:
    import statistics

    return statistics.median(values)


def _start(name: str, only: str, warmup: int, preload: dict) -> subprocess.Popen:
    env = {**os.environ, "BAB_MKL_VENDOR_SHIM": VARIANTS[name], **preload}
    if not preload:
        env.pop("LD_PRELOAD", None)
    # --no-mkl-override: the worker's command line loads nothing itself; $LD_PRELOAD alone decides its kernels
    command = [sys.executable, "-m", "bab", "bench", "blas", "--worker", name, "--only", only, "--warmup", str(warmup),
               "--no-mkl-override"]
    return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _read(worker: subprocess.Popen) -> dict:
    line = worker.stdout.readline()
    if not line:
        raise RuntimeError(f"a bench worker ended without an answer (exit status {worker.wait()}); see its error above")
    return json.loads(line)


def _worker(args) -> int:
    """Build the cases, warm up, say whether the shim is active and each case's first loss, then time one round per
    "time" line on stdin until it closes (one JSON line each on stdout)."""
    import torch

    from bab.core.blas import vendor_shim_active
    from bab.core.timing import single_thread

    with single_thread():
        cases = {}
        for label, (m, k, n) in GEMMS.items():
            generator = torch.Generator().manual_seed(0)
            a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
            cases[label] = (lambda a=a, b=b: float((a @ b)[0, 0]))
        for notebook in chosen_cases(args.only):
            model, loss_of = CASES[notebook][1]()
            cases[f"{notebook} {CASES[notebook][0]}: training step"] = (lambda m=model, f=loss_of: _step(m, f))
        losses = {case: fn() for case, fn in cases.items()}
        for _ in range(args.warmup - 1):
            for fn in cases.values():
                fn()
        print(json.dumps({"active": vendor_shim_active(), "losses": losses}), flush=True)
        for line in sys.stdin:
            if line.strip() != "time":
                continue
            round_ms = {}
            for case, fn in cases.items():
                start = time.perf_counter()
                fn()
                round_ms[case] = 1000 * (time.perf_counter() - start)
            print(json.dumps(round_ms), flush=True)
    return 0


def _step(model, loss_of) -> float:
    """One float32 training step (forward, loss, backward; no optimiser step, so every round sees the same weights)."""
    import torch

    model.train().zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with torch.enable_grad():
        loss = loss_of(model)
        loss.backward()
    return float(loss.detach())
