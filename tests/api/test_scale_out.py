"""`accelerate launch --num_processes 2 -m bab fit heads` gives what one process gives at the same global batch.

Two CPU processes (gloo) each take half of every global batch of 16; DDP averages their gradients, so the
optimisation is the one process's up to float rounding (dropout is off in the tiny model: two processes
draw other dropout masks than one). Evaluation shards the data and gathers: a process that scored only its
own half would report another loss. Only the main process writes: the folder holds the same files.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import api_fixtures
import pandas as pd
import pytest
from api_topics import topic_texts, write_csv

from bab.__main__ import main

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread
run_cache = api_fixtures.run_cache
tiny_encoder = api_fixtures.tiny_encoder
topic_csvs = api_fixtures.topic_csvs

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--budgets", "0.25,0.5,0.75", "--prune", "0.5", "--max-len", "16", "--batch-size", "16", "--epochs", "3,2,1",
        "--dense-lr", "1e-2", "--lr", "2e-3", "--timing-examples", "16", "--timing-len", "16", "--timing-repeats", "1",
        "--quiet"]


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_processes_match_one(tiny_encoder, tmp_path):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("the accelerate command is not installed")
    train = write_csv(tmp_path / "train.csv", topic_texts(32, seed=11))  # 96 rows: 6 global batches of 16
    val = write_csv(tmp_path / "val.csv", topic_texts(5, seed=12))
    data = ["--train", str(train), "--val", str(val), "--test", str(val), "--model", str(tiny_encoder)]
    assert main(["fit", "heads", *data, *ARGS, "--out", str(tmp_path / "one")]) == 0
    # --multi_gpu picks accelerate's torchrun launcher; without a GPU bab's Accelerator(cpu=True) joins a gloo group
    # a run cache of its own: the two processes train, rather than load what the one process stored
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "BAB_CACHE_DIR": str(tmp_path / "cache-two")}
    launched = subprocess.run(
        [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", "-m", "bab", "fit", "heads", *data, *ARGS, "--out", str(tmp_path / "two")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert launched.returncode == 0, launched.stderr[-3000:]

    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    assert (one["processes"], two["processes"]) == (1, 2)
    sweep_one, sweep_two = pd.DataFrame(one["sweep"]), pd.DataFrame(two["sweep"])
    assert sweep_one["accuracy"].tolist() == sweep_two["accuracy"].tolist()
    assert sweep_one["loss"].tolist() == pytest.approx(sweep_two["loss"].tolist(), abs=1e-4)
    for stage in ("dense", "budgeted", "hard"):  # training rows are reduced over both processes' shards
        assert [r["loss"] for r in one["history"][stage]] == pytest.approx(
            [r["loss"] for r in two["history"][stage]], abs=1e-4)
    assert files(tmp_path / "one") == files(tmp_path / "two")
