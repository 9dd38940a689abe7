"""bab.core.blas: when MKL's vendor check is answered, the library that answers it, and what a process then runs."""

import json
import os
import subprocess
import sys

import pytest

from bab.core import blas

AMD_AVX512 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16
processor\t: 1
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16
"""
AMD_AVX2 = AMD_AVX512.replace(" avx512f avx512bw avx512_bf16", "")
INTEL_AVX512 = AMD_AVX512.replace("AuthenticAMD", "GenuineIntel")


def test_cpu_flags_reads_the_first_processor():
    vendor, flags = blas.cpu_flags(AMD_AVX512)
    assert vendor == "AuthenticAMD"
    assert {"avx2", "avx512f", "avx512_bf16"} <= flags and "processor" not in flags


@pytest.mark.parametrize("cpuinfo, machine, env, wanted", [
    (AMD_AVX512, "x86_64", "", True),
    (AMD_AVX512, "x86_64", "1", True),
    (AMD_AVX512, "x86_64", "0", False),  # the user's opt-out
    (AMD_AVX2, "x86_64", "", False),  # MKL's AVX2 kernels are already the CPU's best
    (INTEL_AVX512, "x86_64", "", False),  # MKL already takes its Intel paths
    (AMD_AVX512, "aarch64", "", False),
])
def test_the_shim_is_wanted_only_on_amd_cpus_with_avx512(cpuinfo, machine, env, wanted):
    assert blas.wants_vendor_shim(cpuinfo, machine, env) is wanted


def test_a_bad_opt_out_value_says_what_to_pass():
    with pytest.raises(ValueError, match="BAB_MKL_VENDOR_SHIM must be 0"):
        blas.wants_vendor_shim(AMD_AVX512, "x86_64", "off")


@pytest.fixture
def compiler():
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: the shim cannot be built (and bab then leaves MKL alone)")


def test_the_library_is_built_once_and_defines_the_vendor_check(tmp_path, compiler):
    import ctypes

    path = blas.shim_library(tmp_path)
    assert path is not None and path.parent == tmp_path and path.suffix == ".so"
    built = path.stat().st_mtime_ns
    assert blas.shim_library(tmp_path) == path and path.stat().st_mtime_ns == built  # not rebuilt
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no source or partial file left behind
    assert getattr(ctypes.CDLL(str(path)), blas.SHIM_SYMBOL)() == 1


def test_preload_env_puts_the_library_first_once(monkeypatch, tmp_path):
    library = tmp_path / "shim.so"
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: True)
    monkeypatch.setattr(blas, "shim_library", lambda: library)
    monkeypatch.setenv("LD_PRELOAD", f"/opt/other.so:{library}")
    assert blas.preload_env() == {"LD_PRELOAD": f"{library}:/opt/other.so"}
    monkeypatch.setattr(blas, "shim_library", lambda: None)  # no compiler: nothing to preload
    assert blas.preload_env() == {}


PROBE = """
import json, sys
import bab  # before torch, as a notebook that imports bab first: loads nothing
import torch
from bab.core import blas
torch.manual_seed(0)
a, b = torch.randn(300, 200), torch.randn(200, 100)
error = float((a @ b - (a.double() @ b.double()).float()).abs().max())
print(json.dumps({"active": blas.vendor_shim_active(), "key": blas.blas_key(), "error": error}))
"""


def _probe(**env) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**environment, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_only_the_opt_in_gives_mkl_its_avx512_kernels_and_the_runs_their_own_key(compiler):
    if not blas.wants_vendor_shim():
        pytest.skip("not an AMD CPU with AVX-512: bab leaves MKL alone here")
    preload = subprocess.run([sys.executable, "-m", "bab", "mkl-override"], capture_output=True, text=True,
                             check=True, env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}).stdout.strip()
    on, plain = _probe(LD_PRELOAD=preload), _probe()
    assert on["active"] and on["key"] == {"blas": "mkl-avx512-on-amd"}
    assert not plain["active"] and plain["key"] == {}  # import bab alone: MKL as it chooses, the key as before
    # the same float32 product either way, summed in another order: against float64, float32 rounding only
    assert on["error"] < 1e-4 and plain["error"] < 1e-4


def test_the_mkl_override_command_prints_the_preload_or_ld_preload_as_it_is(monkeypatch, tmp_path, capsys):
    from bab.__main__ import main

    library = tmp_path / blas.shim_path().name
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: False)  # an Intel CPU, or $BAB_MKL_VENDOR_SHIM=0
    assert main(["mkl-override"]) == 0
    assert capsys.readouterr().out == "/opt/other.so\n"  # LD_PRELOAD="$(...)" then changes nothing
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: True)
    monkeypatch.setattr(blas, "shim_library", lambda: library)
    assert main(["mkl-override"]) == 0
    assert capsys.readouterr().out == f"{library}:/opt/other.so\n"


def test_the_kernels_bab_starts_get_the_library_unless_refused(monkeypatch, tmp_path):
    library = blas.shim_path()
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: True)
    monkeypatch.setattr(blas, "shim_library", lambda: library)
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    given = blas.kernel_preload(True)
    assert given == {"LD_PRELOAD": f"{library}:/opt/other.so"}
    assert blas.preloaded(given) == {"blas": "mkl-avx512-on-amd"}  # what the run record says of such a kernel
    said = blas.describe_preload(given)  # what the report's output says of its kernels
    assert "MKL's AVX-512 kernels" in said and "--no-mkl-override" in said
    # --no-mkl-override: the caller's own LD_PRELOAD, the library taken out where it was in it
    monkeypatch.setenv("LD_PRELOAD", f"{library}:/opt/other.so")
    refused = blas.kernel_preload(False)
    assert refused == {"LD_PRELOAD": "/opt/other.so"} and blas.preloaded(refused) == {}
    assert "MKL as it chooses" in blas.describe_preload(refused)
    monkeypatch.delenv("LD_PRELOAD")
    assert blas.kernel_preload(False) == {}


@pytest.mark.parametrize("argv, loads", [
    (["train", "07", "gamma-3"], True),
    (["bench", "heads", "--budgets", "0.5"], True),
    (["fit", "heads", "--train", "x.csv", "--out", "o", "--no-mkl-override"], False),
    (["bench", "heads", "--help"], False),
    (["bench", "heads", "--no-mkl"], False),  # argparse takes the prefix of an option: so does the refusal
    (["report", "--profile", "quick"], False),  # its kernels get it; the runner itself runs no torch
    (["mkl-override"], False),
    ([], False),
])
def test_the_command_line_loads_the_library_only_for_a_computing_command(argv, loads, monkeypatch):
    import bab.__main__ as cli

    loaded = []
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: True)
    monkeypatch.setattr(blas, "load_vendor_shim", lambda: loaded.append(argv) or True)
    assert cli.mkl_override_at_start(argv) is loads and bool(loaded) is loads


def test_every_computing_command_takes_no_mkl_override():
    import argparse

    import bab.__main__ as cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in cli.COMPUTING:
        leaves = cli._leaf_parsers(sub.choices[name])
        assert leaves and all("--no-mkl-override" in leaf._option_string_actions for leaf in leaves), name
    assert "--no-mkl-override" in sub.choices["report"]._option_string_actions


def test_the_bench_refuses_where_there_is_nothing_to_compare(monkeypatch):
    from bab.commands.bench_blas import blas_bench

    with pytest.raises(ValueError, match="--only takes notebooks among 01, 02, 03, 05, 06, 07"):
        blas_bench("04")
    monkeypatch.setenv("MKL_CBWR", "AVX2")  # what nbval's kernels run with: one code branch whatever the CPU
    with pytest.raises(ValueError, match=r"\$MKL_CBWR=AVX2 pins MKL's code branch"):
        blas_bench("05")
    monkeypatch.delenv("MKL_CBWR")
    monkeypatch.setattr(blas, "wants_vendor_shim", lambda: False)
    with pytest.raises(ValueError, match="nothing to compare"):
        blas_bench("05")


# slow (about 30 s): two worker processes each import torch and transformers and build the ViT, then time 2048^3
# products; one notebook and two rounds is the least that still compares the kernels
@pytest.mark.slow
def test_the_bench_times_both_kernels_on_the_same_arithmetic(compiler):
    from bab.commands.bench_blas import GEMMS, blas_bench

    if not blas.wants_vendor_shim():
        pytest.skip("not an AMD CPU with AVX-512: there is one set of MKL kernels here")
    table = blas_bench("05", warmup=1, repeats=2).set_index("case")
    assert list(table.index) == [*GEMMS, "05 ViT, 50 tokens: training step"]
    avx2, avx512 = table["AVX2 result"].to_numpy(), table["AVX-512 result"].to_numpy()
    # the same float32 arithmetic summed in another order: equal to float32 rounding, yet not bit for bit, which
    # only other kernels give (one worker running both times would return identical bits)
    assert avx512 == pytest.approx(avx2, rel=1e-4)
    assert (avx512 != avx2).all()
    # no threshold on the speed-up itself (2.1-2.5x on the idle AMD EPYC, 1.2x beside a notebook's training): a
    # timing depends on what else the machine runs; `python -m bab bench blas` measures it, on a machine left alone
    assert (table[["AVX2 ms", "AVX-512 ms"]] > 0).all().all()
    assert (table["speed-up low"] <= table["speed-up"]).all() and (table["speed-up"] <= table["speed-up high"]).all()


def test_a_run_trained_with_the_shim_is_keyed_apart_and_one_without_keeps_its_key(tmp_path, monkeypatch):
    import torch

    from bab.core import runs

    trained = []

    def run():
        return runs.train_cached(runs.RunCache(tmp_path), "dense", {"data": "x"}, lambda: torch.nn.Linear(2, 2),
                                 lambda model, checkpoint: trained.append(model) or {"loss": 0.0}, seed=1,
                                 method="heads", version=3)

    monkeypatch.setattr(runs, "blas_key", lambda: {})
    _, _, plain = run()
    assert "blas" not in plain["code"]
    monkeypatch.setattr(runs, "blas_key", lambda: {"blas": "mkl-avx512-on-amd"})
    _, metrics, shimmed = run()
    assert shimmed["code"]["blas"] == "mkl-avx512-on-amd" and not metrics["cached"] and len(trained) == 2
    monkeypatch.setattr(runs, "blas_key", lambda: {})
    assert run()[1]["cached"] and len(trained) == 2  # the run without it is still there, under its old key
