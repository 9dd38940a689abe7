"""The smoke regression check: the result rows of a smoke run against the stored reference, metric by metric.

``python -m bab notebooks refresh`` stores each notebook's smoke rows in ``tests/reference/smoke_rows.json``
as it stores its outputs; ``./run_all.sh test`` has nbval write the rows it produces to ``$BAB_RESULTS_DIR``,
and ``tests/report/test_smoke_regression.py`` (run after the notebooks) compares the two. The tolerances are
wide enough for another CPU of this kind and narrow enough to catch a real change. Measured speed-ups are not
compared: they depend on the machine's load, and the timing verdicts cover them.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

from bab.experiments.methods import settings_text

REFERENCE = Path(__file__).resolve().parents[3] / "tests" / "reference" / "smoke_rows.json"
# the numerics fingerprint of the machine that made each notebook's reference rows (``numerics_fingerprint``)
NUMERICS_REFERENCE = REFERENCE.with_name("smoke_numerics.json")
# The torch thread count of every smoke run whose outputs or rows are stored (``notebooks refresh``) or checked
# (nbval, through conftest.py), whatever $BAB_THREADS or the machine's core count says: reductions split over
# another number of threads round differently, and a few-step training carries that far past the tolerances
# (notebook 06 at one thread kept 13% of the context where a two-thread run kept 29%). One thread: no split
# at all, and a smoke check leaves the other core to whatever else the machine runs.
SMOKE_THREADS = 1
# The instruction sets of every smoke kernel, pinned where the libraries allow it. Unpinned, torch's vectorised
# kernels (ATen), MKL's matrix products and oneDNN's convolutions each pick code by the CPU they find (AVX-512
# on one machine, AVX2 on another, a vendor's own path in MKL), and each rounds differently: CI on another
# machine of this kind trained notebook 06's smoke specialists to keep 20% of the context where the
# reference run kept 29%. ATen and oneDNN are capped at AVX2; MKL runs its reproducible AVX2 branch. On a CPU
# that is not Intel's, MKL takes its reproducible automatic branch instead, with fixed cache sizes, unless
# bab.core.blas's library tells it the CPU is Intel's: so the smoke kernels start with it preloaded wherever
# bab.core.blas applies (AMD with AVX-512), and the 2-core AMD EPYC (family 26) then computes the probe below
# bit for bit as the Xeon (family 6, model 207) that made the reference rows; without it, other bits. MKL's
# vendor-neutral "COMPATIBLE" branch would make every x86-64 CPU agree, but its SSE2 products made the smoke
# notebooks 2.5-3.3x slower, past CI's time. So each reference row also names the machine it was made on
# (``numerics_fingerprint``). The record and the quick report keep the machine's fastest paths: they are not
# compared bit for bit across machines.
SMOKE_NUMERICS_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# metric -> (kind, tolerance): "abs" in the metric's unit, "rel" as a fraction of the reference value, or of 1
# where the reference is smaller than 1 (a method's ``value`` may be a correlation near 1 or a share near 0, where a
# fraction of the value itself would be no tolerance at all)
TOLERANCES = {"accuracy": ("abs", 2.0), "accuracy_std": ("abs", 2.0), "cost": ("abs", 0.02),
              "perplexity": ("rel", 0.05), "memory_ratio": ("rel", 0.05), "analytic_limit": ("rel", 0.01),
              "value": ("rel", 0.05)}


def smoke_kernel_env() -> dict[str, str]:
    """The environment every smoke kernel starts with, whoever starts it (``notebooks refresh``, nbval): the
    thread count, training precision and instruction sets its stored outputs and reference rows were made with,
    and MKL's Intel code paths where ``bab.core.blas`` applies (the numerics probe gets the same)."""
    from bab.core.blas import preload_env
    from bab.core.device import DEVICE_ENV
    from bab.core.precision import PRECISION_ENV
    from bab.core.threads import THREADS_ENV

    return {THREADS_ENV: str(SMOKE_THREADS), PRECISION_ENV: "float32", DEVICE_ENV: "cpu", **SMOKE_NUMERICS_ENV,
            **preload_env()}


# A few of every kind of kernel a smoke notebook runs: MKL's matrix products (forward and backward), ATen's
# vectorised normalisation, activations, softmax and long reductions, and oneDNN's convolution.
_PROBE = """
import hashlib, os, torch
torch.set_num_threads(int(os.environ["BAB_THREADS"]))
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(200, 160), torch.nn.LayerNorm(160), torch.nn.GELU(), torch.nn.Linear(160, 7))
x = torch.randn(96, 200)
loss = torch.log_softmax(mlp(x), -1).sum() + torch.sigmoid(x).tanh().exp().mean()
loss.backward()
q, k = torch.randn(8, 64, 32), torch.randn(8, 32, 64)
conv = torch.nn.Conv2d(3, 16, 4, stride=4)(torch.randn(2, 3, 32, 32))
digest = hashlib.sha256()
for t in (loss, mlp[0].weight.grad, mlp[1].weight.grad, q @ k, conv, torch.randn(100_000).sum()):
    digest.update(t.detach().contiguous().numpy().tobytes())
print(digest.hexdigest()[:16])
"""


def cpu_name() -> str:
    """The CPU's name with its family and model numbers (a virtual machine's name may be only "AMD EPYC")."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name") or platform.machine()
    return f"{name} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


@functools.cache
def numerics_fingerprint() -> dict[str, str]:
    """{"fingerprint", "cpu"}: a digest of what torch computes here in a process started with
    ``smoke_kernel_env``, and the CPU's name. Two machines with one fingerprint round every probed kernel alike,
    and, as far as the probe reaches, the smoke notebooks train the same weights on both."""
    env = {**os.environ, **smoke_kernel_env()}
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return {"fingerprint": probe.stdout.strip(), "cpu": cpu_name()}


def read_numerics(path=NUMERICS_REFERENCE) -> dict:
    return _read_entries(path)


def store_numerics(name: str, numerics: dict, path=NUMERICS_REFERENCE) -> None:
    """Record the numerics fingerprint of the machine that made the reference rows of ``name``."""
    _store_entry(path, name, numerics)


def split_by_numerics(names, made_on: dict, here: dict) -> tuple[list[str], list[str]]:
    """(names whose reference rows were made on a machine that rounds as this one does, the other names).

    Rows made elsewhere cannot be held to the tolerances: a few-step training carries a last-bit difference in
    one kernel to a different model. A name with no recorded fingerprint counts as made elsewhere.
    """
    same = [n for n in names if made_on.get(n, {}).get("fingerprint") == here["fingerprint"]]
    return same, [n for n in names if n not in same]


def row_key(row: dict) -> tuple:
    budget = row.get("budget")
    return (row["experiment"], row["method"], None if budget is None else round(float(budget), 4),
            settings_text(row.get("settings")))


def _differs(kind: str, tolerance: float, ours, reference) -> bool:
    if ours is None or reference is None:
        return (ours is None) != (reference is None)
    if kind == "abs":
        return abs(ours - reference) > tolerance
    return abs(ours - reference) > tolerance * max(abs(reference), 1.0)


def compare_rows(rows: list[dict], reference: list[dict]) -> list[str]:
    """Every difference between ``rows`` and ``reference`` beyond the tolerances, as lines (empty: none)."""
    ours = {row_key(r): r for r in rows}
    theirs = {row_key(r): r for r in reference}
    problems = [f"missing row {key}" for key in theirs if key not in ours]
    problems += [f"row not in the reference {key}" for key in ours if key not in theirs]
    for key in ours.keys() & theirs.keys():
        for metric, (kind, tolerance) in TOLERANCES.items():
            a, b = ours[key].get(metric), theirs[key].get(metric)
            if _differs(kind, tolerance, a, b):
                limit = f"{tolerance:g}" if kind == "abs" else f"{tolerance:.0%}"
                problems.append(f"{key}: {metric} {a} vs reference {b} (tolerance {limit})")
    return sorted(problems)


def metric_count(reference: dict) -> int:
    """How many numbers the reference guards (metrics with a value, over every row)."""
    return sum(sum(1 for metric in TOLERANCES if row.get(metric) is not None and math.isfinite(row[metric]))
               for rows in reference.values() for row in rows)


def _read_entries(path) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else {}


def _store_entry(path, name: str, value) -> None:
    """Replace the entry ``name`` of the JSON object in ``path`` and write it, sorted for review."""
    path = Path(path)
    entries = _read_entries(path)
    entries[name] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(entries.items())), indent=1, sort_keys=True) + "\n")


def read_reference(path=REFERENCE) -> dict:
    return _read_entries(path)


def store_reference(name: str, rows: list[dict], path=REFERENCE) -> None:
    """Replace the reference rows of ``name`` (a rows file's stem) and write the file, sorted for review."""
    _store_entry(path, name, rows)
