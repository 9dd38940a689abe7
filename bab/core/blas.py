"""Intel MKL's AVX-512 kernels on AMD CPUs, for torch's float32 matrix products: an opt-in, never a side effect.

On an AMD CPU MKL takes its AVX2 path even where the CPU has AVX-512; a one-line library defining
``mkl_serv_intel_cpu_true`` to return 1, loaded into the global symbol scope before torch, makes it choose by the
instructions the CPU has (about 2.3x on the products of the 2-core AMD EPYC this project is developed on). The
products then sum in another order, so a run trained this way has its own run-cache key (``blas_key``).

It applies on Linux, an x86-64 AMD CPU with AVX-512 (``wants_vendor_shim``), unless ``$BAB_MKL_VENDOR_SHIM=0``;
elsewhere, or without a C compiler (``cc`` builds the library once into the user's cache folder), every function
here is a no-op. Importing bab compiles, loads and preloads nothing: only the processes bab starts (the report's and
the smoke notebooks' kernels) and the CLI's computing commands get it, each saying so. A user opts in with
``LD_PRELOAD="$(python -m bab mkl-override)" CMD`` or, before anything imports torch, ``load_vendor_shim()``;
``describe()`` and ``blas_key()`` say what a process runs. docs/speed.md, "bench blas", has the whole story. This
module imports no torch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

SHIM_ENV = "BAB_MKL_VENDOR_SHIM"  # "0": leave MKL's vendor check alone
SHIM_SYMBOL = "mkl_serv_intel_cpu_true"
SHIM_SOURCE = f"int {SHIM_SYMBOL}(void) {{ return 1; }}\n"
BLAS_KEY = "mkl-avx512-on-amd"  # a cached run's key and a run record say so of a run with the library


def cpu_fields(cpuinfo: str | None = None) -> dict[str, str] | None:
    """{field: value} of the first processor in ``/proc/cpuinfo`` text (default: this machine's; None where it
    cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: str | None = None) -> tuple[str, set[str]]:
    """(vendor id, instruction flags) of the first processor in ``/proc/cpuinfo`` text (default: this machine's)."""
    fields = cpu_fields(cpuinfo) or {}
    return fields.get("vendor_id", ""), set(fields.get("flags", "").split())


_this_cpu = functools.cache(cpu_flags)  # this machine's, read once (every cached run's key asks)


def wants_vendor_shim(cpuinfo: str | None = None, machine: str | None = None, env: str | None = None) -> bool:
    """Whether MKL would run its AVX2 kernels on a CPU that has AVX-512: an AMD x86-64 CPU with ``avx512f``, unless
    ``$BAB_MKL_VENDOR_SHIM`` is "0". The arguments stand in for ``/proc/cpuinfo``, the machine and the variable."""
    env = os.environ.get(SHIM_ENV, "") if env is None else env
    if env.strip() not in ("", "0", "1"):
        raise ValueError(f"${SHIM_ENV} must be 0 (leave MKL's vendor check alone) or 1, got {env!r}")
    if env.strip() == "0":
        return False
    machine = platform.machine() if machine is None else machine
    if machine not in ("x86_64", "AMD64"):
        return False
    vendor, flags = _this_cpu() if cpuinfo is None else cpu_flags(cpuinfo)
    return vendor == "AuthenticAMD" and "avx512f" in flags


def shim_folder() -> Path:
    """Where the compiled library lives: ``$XDG_CACHE_HOME/bab`` (default ``~/.cache/bab``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bab"


def shim_path(folder: Path | None = None) -> Path:
    """Where the compiled library is, or would be, named by its source's hash; builds nothing."""
    folder = shim_folder() if folder is None else Path(folder)
    return folder / f"mkl-vendor-shim-{hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:12]}.so"


def shim_library(folder: Path | None = None) -> Path | None:
    """The compiled library, built on first use (None where there is no C compiler or the build fails). The file is
    named by its source's hash and written under a temporary name first, so two processes never load half a file."""
    folder = shim_folder() if folder is None else Path(folder)
    path = shim_path(folder)
    if path.exists():
        return path
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / f"{path.stem}.{os.getpid()}.c"
        partial = folder / f"{path.stem}.{os.getpid()}.so"
        source.write_text(SHIM_SOURCE)
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(source)], check=True,
                       capture_output=True, timeout=60)
        os.replace(partial, path)
        source.unlink()
    except (OSError, subprocess.SubprocessError):
        return None
    return path


_STATE = {"loaded": False}


def load_vendor_shim() -> bool:
    """Load the library into this process's global symbol scope where ``wants_vendor_shim()``, if torch is not
    imported yet (MKL would already have bound the vendor check). Only on request: the CLI calls it for its computing
    commands, a user for a process of their own. Returns whether MKL now takes its Intel code paths here."""
    if not _STATE["loaded"] and "torch" not in sys.modules and wants_vendor_shim():
        library = shim_library()
        if library is not None:
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
            _STATE["loaded"] = True
    return vendor_shim_active()


def vendor_shim_active() -> bool:
    """Whether MKL's vendor check answers "Intel" on this AMD CPU: the first ``mkl_serv_intel_cpu_true`` in the global
    symbol scope (ours, loaded early or through ``LD_PRELOAD``) returns 1."""
    if not wants_vendor_shim():
        return False
    try:
        return bool(getattr(ctypes.CDLL(None), SHIM_SYMBOL)())
    except (AttributeError, OSError):
        return False


def preload_env() -> dict:
    """``{"LD_PRELOAD": ...}`` with the library first, for the processes this one starts (a notebook's kernel may import
    torch before bab), where ``wants_vendor_shim()`` and the library could be built; else ``{}``."""
    library = shim_library() if wants_vendor_shim() else None
    if library is None:
        return {}
    others = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != str(library)]
    return {"LD_PRELOAD": ":".join([str(library), *others])}


def kernel_preload(override: bool = True) -> dict:
    """The ``LD_PRELOAD`` of the processes bab starts for its own kernels: ``preload_env()`` with ``override``; without
    it (``--no-mkl-override``) the caller's ``$LD_PRELOAD`` with this library taken out, where it was in it."""
    if override:
        return preload_env()
    current = os.environ.get("LD_PRELOAD")
    if current is None:
        return {}
    return {"LD_PRELOAD": ":".join(p for p in current.split(":") if p and p != str(shim_path()))}


def describe_preload(env: dict, whose: str = "the kernels") -> str:
    """In words, what the processes started with ``env`` (``kernel_preload()``'s) multiply with: a line for the output
    of the command that started them."""
    library = env.get("LD_PRELOAD", "").split(":")[0]
    if library and Path(library).name == shim_path().name:
        return (f"{whose}: MKL's AVX-512 kernels on this AMD CPU (bab.core.blas's library in LD_PRELOAD; "
                f"--no-mkl-override leaves MKL alone)")
    return f"{whose}: MKL as it chooses" + (" (its AVX2 kernels on this AMD CPU)" if wants_vendor_shim() else "")


def preloaded(env) -> dict:
    """What a run record says of the matrix kernels of a process started with ``env``: ``{"blas": ...}`` as
    ``blas_key()`` where this library comes first in its ``LD_PRELOAD`` and applies here, else nothing (the records of
    the runs without it read as they did before)."""
    library = env.get("LD_PRELOAD", "").split(":")[0]
    applies = library and Path(library).name == shim_path().name and wants_vendor_shim()
    return {"blas": BLAS_KEY} if applies else {}


def describe() -> str:
    """The matrix kernels of this process, in words."""
    if vendor_shim_active():
        return "MKL's AVX-512 kernels on this AMD CPU (bab.core.blas)"
    return "MKL as it chooses" + (" (its AVX2 kernels on this AMD CPU)" if wants_vendor_shim() else "")


def blas_key() -> dict:
    """What a cached run's key says of its matrix kernels: nothing where MKL runs as it chooses (the keys made before
    this option stay valid), ``{"blas": "mkl-avx512-on-amd"}`` where the vendor shim is active."""
    return {"blas": BLAS_KEY} if vendor_shim_active() else {}

