"""`import bab` and its subpackages change nothing in the importing process: no process started, no library of bab's
own loaded, no variable set, no torch setting changed. Each import runs in a fresh interpreter, watched from inside."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bab
from bab.core import blas

# Every top-level subpackage of bab, and the command line's module (imported, not run).
PACKAGES = sorted(p.name for p in Path(bab.__file__).parent.iterdir() if (p / "__init__.py").is_file())
MODULES = ["bab", *(f"bab.{name}" for name in PACKAGES), "bab.__main__", "bab.core.blas"]

AMD_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"

# Runs in a fresh interpreter: the modules named in argv are imported before torch, as a user's script may, with
# every way of starting a process recorded (and let through); then torch's settings as the imports left them.
WATCH = r"""
import json, os, pathlib, subprocess, sys
if os.environ.get("PRETEND_CPUINFO"):  # a CPU where bab.core.blas applies: its check reads /proc/cpuinfo
    read_text = pathlib.Path.read_text
    pathlib.Path.read_text = lambda self, *a, **k: (os.environ["PRETEND_CPUINFO"] if str(self) == "/proc/cpuinfo"
                                                    else read_text(self, *a, **k))
started = []
for module, name in ((subprocess, "Popen"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "fork"), (os, "system"),
                     (os, "execv"), (os, "execve")):
    if hasattr(module, name):
        def record(*args, _name=name, _original=getattr(module, name), **kwargs):
            started.append(_name)
            return _original(*args, **kwargs)
        setattr(module, name, record)
environ = dict(os.environ)
import importlib
for module in sys.argv[1:]:
    importlib.import_module(module)
changed = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
maps = open("/proc/self/maps").read() if os.path.exists("/proc/self/maps") else ""
import torch
state = {"threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
         "dtype": str(torch.get_default_dtype()), "deterministic": torch.are_deterministic_algorithms_enabled(),
         "cudnn deterministic": torch.backends.cudnn.deterministic, "grad": torch.is_grad_enabled(),
         "matmul precision": torch.get_float32_matmul_precision()}
print(json.dumps({"started": started, "environ": changed, "torch": state, "maps": maps}))
"""


def _imported(*modules: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", WATCH, *modules], env={**environment, **env}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_subpackage_is_watched():
    assert {"core", "api", "report", "commands", "heads", "context", "sparsifiner", "experiments"} <= set(PACKAGES)


@pytest.mark.parametrize("cpuinfo", ["", AMD_CPUINFO], ids=["this CPU", "an AMD CPU with AVX-512"])
def test_importing_bab_starts_nothing_loads_nothing_and_sets_nothing(cpuinfo, tmp_path):
    cache = tmp_path / "cache"  # where bab.core.blas would compile its library
    seen = _imported(*MODULES, XDG_CACHE_HOME=str(cache), PRETEND_CPUINFO=cpuinfo)
    assert seen["started"] == []  # no compiler run, no kernel, no helper process
    assert seen["environ"] == []  # LD_PRELOAD included
    assert "mkl-vendor-shim" not in seen["maps"] and blas.shim_path().name not in seen["maps"]
    assert not cache.exists()
    assert seen["torch"] == _imported(XDG_CACHE_HOME=str(cache), PRETEND_CPUINFO=cpuinfo)["torch"]  # torch alone


def test_the_watch_sees_what_an_import_with_side_effects_does(tmp_path):
    # the watch catches what it is there to catch: a module that loads bab.core.blas's library the way `import bab`
    # once did, on a CPU where it applies (where there is a C compiler to build it)
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the library cannot be built here")
    (tmp_path / "_loads_the_shim.py").write_text("from bab.core.blas import load_vendor_shim\nload_vendor_shim()\n")
    cache = tmp_path / "cache"
    seen = _imported("_loads_the_shim", XDG_CACHE_HOME=str(cache), PRETEND_CPUINFO=AMD_CPUINFO,
                     PYTHONPATH=str(tmp_path))
    assert "Popen" in seen["started"] and blas.shim_path().name in seen["maps"]
    assert cache.exists()
