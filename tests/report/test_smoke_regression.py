"""The smoke regression check: the rows the notebooks wrote in this session (nbval, under ./run_all.sh test)
against tests/reference/smoke_rows.json; and the comparison itself on rows built by hand."""

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bab.experiments.methods import settings_text
from bab.report.compare.regression import NUMERICS_REFERENCE, REFERENCE, numerics_fingerprint, store_numerics
from bab.report.results.contract import ROWS_DIR_ENV

# metric -> (kind, tolerance): "abs" in the metric's unit, "rel" as a fraction of the reference value, or of 1
# where the reference is smaller than 1 (a method's ``value`` may be a correlation near 1 or a share near 0, where a
# fraction of the value itself would be no tolerance at all). Measured speed-ups are not compared: they depend on
# the machine's load, and the timing verdicts cover them.
TOLERANCES = {"accuracy": ("abs", 2.0), "accuracy_std": ("abs", 2.0), "cost": ("abs", 0.02),
              "perplexity": ("rel", 0.05), "memory_ratio": ("rel", 0.05), "analytic_limit": ("rel", 0.01),
              "value": ("rel", 0.05)}

def read_reference(path=REFERENCE) -> dict:
    return json.loads(Path(path).read_text())


def read_numerics(path=NUMERICS_REFERENCE) -> dict:
    return json.loads(Path(path).read_text())


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


BASE = {"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.5, "accuracy": 97.0,
        "speedup": None}


def test_differences_beyond_the_tolerances_are_reported_and_within_them_are_not():
    assert compare_rows([{**BASE, "accuracy": 98.9, "cost": 0.515, "speedup": 3.0}], [BASE]) == []
    problems = compare_rows([{**BASE, "accuracy": 99.5}], [BASE])
    assert problems == ["('synthetic', 'warm-start budgeted', 0.5, ''): accuracy 99.5 vs reference 97.0 "
                        "(tolerance 2)"]
    assert compare_rows([{**BASE, "cost": 0.53}], [BASE])[0].endswith("cost 0.53 vs reference 0.5 (tolerance 0.02)")
    lm = {**BASE, "experiment": "gpt2_context_pruning", "method": "dense", "budget": 1.0, "perplexity": 20.0}
    assert compare_rows([{**lm, "perplexity": 20.9}], [lm]) == []
    assert "perplexity 21.1 vs reference 20.0 (tolerance 5%)" in compare_rows([{**lm, "perplexity": 21.1}], [lm])[0]
    assert compare_rows([{**BASE, "accuracy": None}], [BASE])  # a number that vanished is a difference
    other = {**BASE, "budget": 0.25}
    assert compare_rows([BASE], [BASE, other]) == ["missing row ('synthetic', 'warm-start budgeted', 0.25, '')"]
    assert compare_rows([BASE, other], [BASE]) == ["row not in the reference ('synthetic', 'warm-start budgeted', "
                                                   "0.25, '')"]
    assert set(TOLERANCES) >= {"accuracy", "cost", "perplexity"}


def test_a_methods_value_and_the_seed_spread_are_guarded_too():
    spearman = {**BASE, "experiment": "bert_ag_news", "method": "gate ranking", "budget": None, "value": 0.9}
    assert compare_rows([{**spearman, "value": 0.94}], [spearman]) == []  # below 1: within 0.05 of it
    assert compare_rows([{**spearman, "value": 0.96}], [spearman])[0].endswith("value 0.96 vs reference 0.9 "
                                                                                 "(tolerance 5%)")
    share = {**spearman, "method": "compute, structural", "budget": 0.5, "value": 40.0}
    assert compare_rows([{**share, "value": 41.9}], [share]) == []  # 5% of 40 is 2
    assert compare_rows([{**share, "value": 42.1}], [share])
    spread = {**BASE, "accuracy_std": 1.0}
    assert compare_rows([{**spread, "accuracy_std": 2.9}], [spread]) == []
    assert compare_rows([{**spread, "accuracy_std": 3.1}], [spread])


def test_the_reference_covers_every_notebook_and_guards_many_numbers():
    reference = read_reference()
    experiments = {row["experiment"] for rows in reference.values() for row in rows}
    assert {"synthetic", "ag_news_custom", "bert_ag_news", "bert_dbpedia14", "vit_sparsifiner",
            "gpt2_context_pruning", "pretrained_context_pruning"} <= experiments
    assert metric_count(reference) > 100


def test_rows_are_held_to_the_tolerances_only_where_this_machine_rounds_as_the_reference_machine_did():
    here = {"fingerprint": "aaaa", "cpu": "CPU A"}
    made_on = {"synthetic": {"fingerprint": "aaaa", "cpu": "CPU A"}, "vit": {"fingerprint": "bbbb", "cpu": "CPU B"}}
    assert split_by_numerics(["synthetic", "vit", "new"], made_on, here) == (["synthetic"], ["vit", "new"])


def test_the_numerics_fingerprint_is_stable_and_recorded_per_notebook(tmp_path):
    numerics = numerics_fingerprint()
    numerics_fingerprint.cache_clear()
    assert numerics_fingerprint() == numerics  # a second probe process computes the same bits
    assert len(numerics["fingerprint"]) == 16 and numerics["cpu"]
    path = tmp_path / "numerics.json"
    store_numerics("synthetic", numerics, path)
    store_numerics("vit", {"fingerprint": "0", "cpu": "elsewhere"}, path)
    assert read_numerics(path) == {"synthetic": numerics, "vit": {"fingerprint": "0", "cpu": "elsewhere"}}


def test_every_reference_entry_names_the_machine_it_was_made_on():
    assert set(read_numerics()) == set(read_reference())


@pytest.mark.after_notebooks
def test_smoke_rows_written_in_this_session_match_the_reference():
    folder = os.environ.get(ROWS_DIR_ENV)
    if not folder:
        pytest.skip(f"${ROWS_DIR_ENV} is not set: ./run_all.sh test sets it for nbval's notebooks")
    written = {p.stem: json.loads(p.read_text())["rows"] for p in sorted(Path(folder).glob("*.json"))}
    if not written:
        pytest.skip("no notebook wrote rows in this session (nbval did not run the notebooks)")
    reference = read_reference()
    problems = [f"{name}: no reference rows (run `python -m bab notebooks refresh`)"
                for name in written if name not in reference]
    here, made_on = numerics_fingerprint(), read_numerics()
    same, elsewhere = split_by_numerics([name for name in written if name in reference], made_on, here)
    not_compared = [f"{name} (made on {made_on.get(name, {}).get('cpu', 'an unrecorded machine')}, "
                    f"fingerprint {made_on.get(name, {}).get('fingerprint')})" for name in elsewhere]
    explanation = (f"this machine ({here['cpu']}) rounds the pinned smoke kernels differently (fingerprint "
                   f"{here['fingerprint']}) from the machine that made the reference rows of "
                   f"{', '.join(not_compared)}; run `python -m bab notebooks refresh` here to compare them")
    for name in same:
        problems += [f"{name}: {p}" for p in compare_rows(written[name], reference[name])]
    assert not problems, "smoke rows moved beyond their tolerances:\n" + "\n".join(problems)
    if not same:
        pytest.skip(explanation)
    if elsewhere:
        warnings.warn(explanation, stacklevel=1)


def test_the_smoke_kernels_and_the_numerics_probe_take_mkls_intel_paths_where_bab_core_blas_applies():
    from bab.core import blas
    from bab.report.compare.regression import smoke_kernel_env

    if not blas.wants_vendor_shim() or blas.shim_library() is None:
        pytest.skip("bab.core.blas leaves MKL alone here (not an AMD CPU with AVX-512, or no C compiler)")
    env = {**os.environ, **smoke_kernel_env()}
    assert env["LD_PRELOAD"].split(":")[0] == str(blas.shim_library())
    # torch imported before bab, as the probe and a notebook may: MKL's vendor check must already answer "Intel"
    probe = "import torch; from bab.core import blas; print(blas.vendor_shim_active())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "True"
