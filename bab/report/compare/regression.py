"""The smoke regression check's reference and the smoke kernels' settings.

``python -m bab notebooks refresh`` stores each notebook's smoke rows in ``tests/reference/smoke_rows.json``
as it stores its outputs, with the numerics fingerprint of the machine that made them; ``./run_all.sh test`` has
nbval write the rows it produces to ``$BAB_RESULTS_DIR``, and ``tests/report/test_smoke_regression.py`` (run after
the notebooks) compares the two within its tolerances.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from bab.core.blas import cpu_fields

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
    fields = cpu_fields()
    if fields is None:
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


def store_numerics(name: str, numerics: dict, path=NUMERICS_REFERENCE) -> None:
    """Record the numerics fingerprint of the machine that made the reference rows of ``name``."""
    _store_entry(path, name, numerics)


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


def store_reference(name: str, rows: list[dict], path=REFERENCE) -> None:
    """Replace the reference rows of ``name`` (a rows file's stem) and write the file, sorted for review."""
    _store_entry(path, name, rows)
