"""``accelerate launch --num_processes 2`` trains each method as one process does at the same global batch.

Two CPU processes (gloo) each take half of every global batch; DDP averages their gradients, so the
optimisation is one process's up to float rounding, the schedule steps once per global step, and each
history row is reduced over both processes' shards.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.mark.slow
def test_two_processes_train_every_method_as_one(tmp_path):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("the accelerate command is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, str(HERE / "loop_runs.py"), str(tmp_path / "one.json")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run(
        [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", str(HERE / "loop_runs.py"), str(tmp_path / "two.json")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert (one["processes"], two["processes"]) == (1, 2)
    for method in ("heads", "lm", "vit"):
        a, b = one["runs"][method], two["runs"][method]
        assert len(a["history"]) == len(b["history"]) >= 2, method
        for row_a, row_b in zip(a["history"], b["history"], strict=True):
            assert row_a.keys() == row_b.keys()
            for key, value in row_a.items():
                if isinstance(value, float):
                    assert row_b[key] == pytest.approx(value, abs=1e-4), (method, key)
                else:
                    assert row_b[key] == value, (method, key)
        assert b["weights"] == pytest.approx(a["weights"], abs=1e-3), method
