"""What decides a lane's numbers, recorded when it lands and compared at every later commit.

- ``profile``: a digest of the lane's profile (every size, epoch, learning rate and seed list of its experiment);
- ``method``: its method package's ``TRAINING_VERSION`` and ``EVALUATION_VERSION`` (bumped when a change moves
  what training or a measurement gives) and the results contract (what a row means);
- ``objectives``: what the method's tiny training runs of ``tests/core/objective_fingerprints.py`` end with: the
  random-number state (how many draws: exact on any machine), the selected epoch, and the losses and weight norms,
  compared to ``RTOL`` so that two CPUs rounding one kernel differently still agree while a changed objective does
  not;
- ``libraries``: torch's and transformers' versions.

A refactor leaves all of them equal and the lane valid; a change to what trains or measures moves one, and the lane
is stale (``differences`` says which). The objective runs take half a minute, so their summary is kept in the run
cache per digest of the package's source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bab.core.provenance import PACKAGE_ROOT
from bab.experiments.registry import BUDGETED_ATTENTION, DYNAMIC_CONTEXT_PRUNING, SPARSIFINER, Notebook

# each paper's method package, and the prefix of its runs in the objective fingerprints
METHODS = {BUDGETED_ATTENTION: ("bab.heads", "heads-"), DYNAMIC_CONTEXT_PRUNING: ("bab.context", "lm-"),
           SPARSIFINER: ("bab.sparsifiner", "vit-")}
OBJECTIVES_SCRIPT = Path("tests") / "core" / "objective_fingerprints.py"
RTOL, ATOL = 1e-4, 1e-6  # last-bit differences between CPUs grow to ~1e-6 over the tiny runs' few steps
HISTORY_KEYS = ("loss", "train_ce", "cost", "keep_mass")  # continuous (accuracies and selection scores count examples)


def profile_digest(notebook: Notebook, profile: str) -> str:
    """SHA-256 (16 hex digits) of the notebook's profiles at ``profile``, every field."""
    from bab.experiments.profiles import get_profile

    fields = {experiment: dataclasses.asdict(get_profile(experiment, profile)) for experiment, _ in notebook.profiles}
    text = json.dumps(fields, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def method_versions(notebook: Notebook) -> dict:
    from bab.report.results.contract import RESULTS_CONTRACT

    package = importlib.import_module(METHODS[notebook.paper][0])
    return {"package": package.__name__, "training": getattr(package, "TRAINING_VERSION", None),
            "evaluation": getattr(package, "EVALUATION_VERSION", None), "results_contract": RESULTS_CONTRACT}


def library_versions() -> dict:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def lane_fingerprints(notebook: Notebook, profile: str, objectives: dict) -> dict:
    """The fingerprints of ``notebook``'s lanes at ``profile`` now; ``objectives``: ``objective_summaries()``."""
    prefix = METHODS[notebook.paper][1]
    return {"profile": profile_digest(notebook, profile), "method": method_versions(notebook),
            "objectives": {name: summary for name, summary in sorted(objectives.items()) if name.startswith(prefix)},
            "libraries": library_versions()}


def differences(landed: dict, now: dict) -> list[str]:
    """Which fingerprints of a landed lane differ from ``now``'s: [] when it is still valid."""
    changed = [key for key in ("profile", "method", "libraries") if landed.get(key) != now.get(key)]
    before, after = landed.get("objectives") or {}, now.get("objectives") or {}
    if set(before) != set(after):
        changed.append("objectives (other runs)")
    changed += [f"objective {name}" for name in sorted(set(before) & set(after))
                if not _summaries_agree(before[name], after[name])]
    return changed


def _summaries_agree(a: dict, b: dict) -> bool:
    if a.get("rng") != b.get("rng") or a.get("selected_epoch") != b.get("selected_epoch"):
        return False
    for key in ("history", "norms"):
        x, y = a.get(key) or [], b.get(key) or []
        if len(x) != len(y):
            return False
        if not all(math.isclose(u, v, rel_tol=RTOL, abs_tol=ATOL) for u, v in zip(x, y, strict=True)):
            return False
    return True


def summarise(runs: dict) -> dict:
    """{run name: summary} of what ``objective_fingerprints.py save`` wrote ({name: state, history, rng ...})."""
    import torch

    summaries = {}
    for name, run in runs.items():
        rng = run["rng"]
        seed_state = hashlib.sha256(rng["torch"].numpy().tobytes() + rng["python"].encode() + rng["numpy"].encode())
        history = [float(entry[key]) for entry in run["history"] for key in HISTORY_KEYS if key in entry]
        norms = [float(torch.linalg.vector_norm(tensor.double())) for _, tensor in sorted(run["state"].items())
                 if tensor.is_floating_point()]
        summaries[name] = {"rng": seed_state.hexdigest()[:16], "selected_epoch": run["selected_epoch"],
                           "history": history, "norms": norms}
    return summaries


def source_digest(root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 (16 hex digits) of every ``bab`` source file and the objectives script: when it is unchanged, so are
    the objective runs."""
    digest = hashlib.sha256()
    for path in sorted([*(root / "bab").rglob("*.py"), root / OBJECTIVES_SCRIPT]):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def objective_summaries(root: Path = PACKAGE_ROOT, cache_root: Path | None = None) -> dict:
    """``summarise`` of the objective runs of the checkout at ``root``, run in a fresh one-thread process (half a
    minute) or read from the run cache when the source is unchanged."""
    import torch

    from bab.core.runs import default_cache_root

    script = root / OBJECTIVES_SCRIPT
    if not script.is_file():
        raise FileNotFoundError(f"{script} is missing: the record's lanes are fingerprinted from a source checkout")
    stored = Path(cache_root or default_cache_root()) / "lanes" / f"objectives-{source_digest(root)}.json"
    if stored.is_file():
        return json.loads(stored.read_text())
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "runs.pt"
        env = {**os.environ, "BAB_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
        done = subprocess.run([sys.executable, str(script), "save", str(saved)], cwd=root, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the objective runs ({script}) failed:\n{done.stderr[-4000:]}")
        summaries = summarise(torch.load(saved, weights_only=False))
    stored.parent.mkdir(parents=True, exist_ok=True)
    partial = stored.with_suffix(".tmp")
    partial.write_text(json.dumps(summaries))
    partial.replace(stored)
    return summaries
