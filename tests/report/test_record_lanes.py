"""The record built lane by lane (bab.report.lanes): the plan, the fingerprints that keep a lane valid, landing and
the front page of a partial record, checked on the committed paper record's files of notebook 02."""

import json
import re
import shutil
from pathlib import Path

import pytest

from bab.experiments.registry import NOTEBOOKS
from bab.report.lanes import plan
from bab.report.lanes.fingerprints import differences, lane_fingerprints, profile_digest, summarise
from bab.report.lanes.landing import front_page, land
from bab.report.lanes.plan import LANDED, NOT_RUN, STALE, Lane, lane_states, next_lanes, record_lanes

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "reports" / "paper"
BY_STEM = {notebook.stem: notebook for notebook in NOTEBOOKS}
AG_NEWS = BY_STEM["02_ag_news_custom"]


@pytest.fixture
def three_seeds(monkeypatch):
    """Every notebook at seeds 7, 13, 21 (the record profile's), whatever the profiles say."""
    monkeypatch.setattr(plan, "notebook_seeds", lambda stem, profile: (7, 13, 21))


def summary(rng="r0", history=(0.5, 0.25), norms=(1.0, 2.0)):
    return {"rng": rng, "selected_epoch": None, "history": list(history), "norms": list(norms)}


def fingerprints(**changes):
    base = {"profile": "p0", "method": {"package": "bab.heads", "training": 3, "evaluation": 1,
                                        "results_contract": 2},
            "objectives": {"heads-dense": summary()}, "libraries": {"torch": "2.13.0", "transformers": "5.23"}}
    return {**base, **changes}


def test_the_lanes_run_seed_by_seed_so_a_partial_record_reaches_every_notebook_early(three_seeds):
    lanes = record_lanes()
    assert len(lanes) == 3 * len(NOTEBOOKS)
    assert [lane.seed for lane in lanes[:len(NOTEBOOKS)]] == [7] * len(NOTEBOOKS)
    assert [lane.notebook.stem for lane in lanes[:len(NOTEBOOKS)]] == [nb.stem for nb in NOTEBOOKS]
    assert lanes[len(NOTEBOOKS)].label == "01 seed 13" and lanes[0].stem == "01_synthetic-seed7"


def test_a_notebook_run_at_one_seed_is_refused_by_the_record(monkeypatch):
    monkeypatch.setattr(plan, "notebook_seeds", lambda stem, profile: () if stem.startswith("05") else (7, 13))
    with pytest.raises(ValueError, match="05_vit_sparsifiner at one seed"):
        record_lanes()


def test_a_lane_stays_valid_while_its_fingerprints_agree_and_turns_stale_when_one_moves():
    landed = fingerprints()
    assert differences(landed, fingerprints()) == []
    # another CPU rounding a kernel otherwise: the losses and norms agree to ~1e-7, the draws exactly
    nearby = fingerprints(objectives={"heads-dense": summary(history=(0.5 * (1 + 3e-7), 0.25), norms=(1.0, 2.0))})
    assert differences(landed, nearby) == []
    moved = fingerprints(objectives={"heads-dense": summary(history=(0.5 * (1 + 1e-3), 0.25))})
    assert differences(landed, moved) == ["objective heads-dense"]
    assert differences(landed, fingerprints(objectives={"heads-dense": summary(rng="r1")})) == [
        "objective heads-dense"]  # one random draw more or fewer
    assert differences(landed, fingerprints(profile="p1")) == ["profile"]
    method = {**landed["method"], "evaluation": 2}
    assert differences(landed, fingerprints(method=method)) == ["method"]
    assert differences(landed, fingerprints(objectives={})) == ["objectives (other runs)"]


def test_the_profile_digest_follows_every_field_of_the_notebooks_profile(monkeypatch):
    import bab.experiments.profiles as profiles

    before = profile_digest(AG_NEWS, "quick")
    assert profile_digest(AG_NEWS, "quick") == before and profile_digest(AG_NEWS, "smoke") != before
    real = profiles.get_profile
    monkeypatch.setattr(profiles, "get_profile", lambda e, p: real(e, p).__class__(**{
        **real(e, p).__dict__, "num_test": real(e, p).num_test + 1}))
    assert profile_digest(AG_NEWS, "quick") != before


def test_a_lane_takes_only_its_own_methods_objective_runs():
    objectives = {"heads-dense": summary(), "lm-lm": summary(), "vit-dense": summary()}
    taken = lane_fingerprints(AG_NEWS, "quick", objectives)
    assert list(taken["objectives"]) == ["heads-dense"]
    assert taken["method"]["package"] == "bab.heads" and taken["method"]["training"] is not None
    assert list(lane_fingerprints(BY_STEM["06_gpt2_context_pruning"], "quick", objectives)["objectives"]) == ["lm-lm"]


def test_the_summary_of_an_objective_run_is_its_draws_losses_and_norms():
    import torch

    run = {"state": {"w": torch.tensor([3.0, 4.0]), "steps": torch.tensor([2])}, "selected_epoch": 1,
           "history": [{"epoch": 1, "loss": 0.5, "train_accuracy": 50.0, "selection": 0.75}],
           "rng": {"torch": torch.tensor([1, 2], dtype=torch.uint8), "python": "p", "numpy": "n"}}
    got = summarise({"x": run})["x"]
    assert got["history"] == [0.5] and got["norms"] == [5.0] and got["selected_epoch"] == 1
    other = {**run, "rng": {**run["rng"], "torch": torch.tensor([1, 3], dtype=torch.uint8)}}
    assert summarise({"x": other})["x"]["rng"] != got["rng"]


def staged_lane(tmp_path: Path, seed: int, status: str = "ok") -> Path:
    """A staging folder holding what ``run_notebook`` writes for notebook 02 at ``seed`` (the paper record's)."""
    staging = tmp_path / f"staging-{seed}"
    stem = f"02_ag_news_custom-seed{seed}"
    for name in (f"{stem}.ipynb", f"{stem}.html", f"results/{stem}.json", f"results/{stem}.outcomes.npz"):
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PAPER / name, staging / name)
    run = json.loads((PAPER / "runs" / f"{stem}.json").read_text())
    (staging / "runs").mkdir(exist_ok=True)
    (staging / "runs" / f"{stem}.json").write_text(json.dumps({**run, "status": status, "cpu_seconds": 2718.5}))
    return staging


def test_a_lane_lands_its_pages_rows_and_outcomes_and_a_failed_one_lands_nothing(tmp_path):
    folder = tmp_path / "record"
    lane = Lane(AG_NEWS, 7)
    with pytest.raises(ValueError, match="did not end ok"):
        land(staged_lane(tmp_path, 7, status="failed"), folder, lane, fingerprints())
    assert not folder.exists()
    staging, stem = staged_lane(tmp_path, 7), lane.stem
    # its first model taken from the run cache: what it cost the run that trained it counts toward the lane's cost
    rows = json.loads((staging / "results" / f"{stem}.json").read_text())
    rows["models"][0]["cached"] = True
    (staging / "results" / f"{stem}.json").write_text(json.dumps(rows))
    record = land(staging, folder, lane, fingerprints())
    outcomes = f"results/{stem}.outcomes.npz"
    assert (folder / outcomes).read_bytes() == (PAPER / outcomes).read_bytes()
    for name in (f"{stem}.ipynb", f"{stem}.html"):  # the same but for the figures, which land as palette PNGs
        landed, staged = ((f / name).read_text() for f in (folder, PAPER))
        figures = re.compile(r"(image/png(?:;base64,|\": \"))[A-Za-z0-9+/=]+")
        assert figures.sub(r"\1", landed) == figures.sub(r"\1", staged) and len(landed) < 0.8 * len(staged)
    assert json.loads((folder / "results" / f"{stem}.json").read_text()) == rows
    assert record["commit"] == "1eefc67" and record["seconds"] == 2943.84 and record["seed"] == 7
    assert record["cpu_seconds"] == 2718.5  # the kernel's time on its core, beside the wall time
    assert record["cached_seconds"] == round(rows["models"][0]["train_seconds"], 2) == 305.82
    assert json.loads((folder / "lanes" / f"{stem}.json").read_text())["fingerprints"] == fingerprints()
    assert not list(folder.rglob(".*.landing"))


def test_the_front_page_of_a_partial_record_judges_landed_claims_and_names_the_lanes_others_wait_for(
        tmp_path, three_seeds, monkeypatch):
    from bab.report.lanes import landing

    monkeypatch.setattr(landing, "_reductions", lambda notebook, profile: (
        ("3 of the paper's 6 dense epochs",) if notebook is AG_NEWS else ()))
    folder = tmp_path / "record"
    for seed in (7, 13, 21):
        land(staged_lane(tmp_path, seed), folder, Lane(AG_NEWS, seed), fingerprints())
    now = {nb.stem: fingerprints() for nb in NOTEBOOKS}
    now["02_ag_news_custom"] = fingerprints()
    states = lane_states(folder, lambda notebook: now[notebook.stem], record_lanes())
    assert [s.lane.label for s in states if s.state == LANDED] == ["02 seed 7", "02 seed 13", "02 seed 21"]
    assert next_lanes(states, 2) == [Lane(BY_STEM["01_synthetic"], 7), Lane(BY_STEM["03_bert_ag_news"], 7)]
    front_page(folder, states, ROOT)
    results = json.loads((folder / "results.json").read_text())
    claims = {c["id"]: c for c in results["claims"]}
    agnews_only = claims["baa-agnews-skip-speed"]  # reads notebook 02's rows alone
    assert agnews_only["verdict"] not in ("not run",) and agnews_only["seeds"] == 3
    assert agnews_only["setup"].endswith("record: 3 of the paper's 6 dense epochs")
    assert agnews_only["setting"].endswith("record: the reductions of 02")
    ours = claims["baa-agnews-budgeted-our-recipe"]  # its own setup stays in the setting shown, before the record's
    assert ours["setting"].startswith("our recipe") and ours["setting"].endswith("record: the reductions of 02")
    synthetic = claims["baa-cost-tracks-budget"]  # notebook 01's rows
    assert synthetic["verdict"] == "not run" and "01 seed 7, 01 seed 13, 01 seed 21" in synthetic["why"]
    assert [lane["state"] for lane in results["lanes"]].count(LANDED) == 3
    page = (folder / "index.html").read_text()
    assert "Lanes: 3 of 21 landed" in page and NOT_RUN in page and "1eefc67" in page
    assert "<td>49 min 04 s</td>\n<td>45 min 18 s</td>" in page  # wall time, then core time
    assert "<tr><td>02_ag_news_custom</td><td>3 of the paper&#39;s 6 dense epochs</td></tr>" in page
    # a fingerprint moved since: the lane is stale, and runs again first
    now["02_ag_news_custom"] = fingerprints(profile="p1")
    states = lane_states(folder, lambda notebook: now[notebook.stem], record_lanes())
    assert {s.state for s in states if s.lane.notebook is AG_NEWS} == {STALE}
    assert next_lanes(states, 1) == [Lane(BY_STEM["01_synthetic"], 7)]
    assert states[1].changed == ["profile"]


def test_the_record_commands_refuse_bad_input_in_one_line(tmp_path, capsys, three_seeds, monkeypatch):
    from bab.__main__ import main

    assert main(["record", "plan", "--checkout", str(tmp_path)]) == 2
    assert "not a bab source checkout" in capsys.readouterr().err
    assert main(["record", "next", "--lanes", "0"]) == 2
    assert "--lanes must be at least 1" in capsys.readouterr().err
    assert main(["record", "pages", "--folder", str(tmp_path)]) == 2
    assert "holds no landed lane" in capsys.readouterr().err
    # a record built lane by lane is written by the record command alone
    (tmp_path / "smoke" / "lanes").mkdir(parents=True)
    assert main(["report", "run", "--profile", "smoke", "--reports-dir", str(tmp_path)]) == 2
    assert "built lane by lane" in capsys.readouterr().err


def test_record_next_names_the_lanes_it_would_run_and_refuses_an_unknown_one(tmp_path, capsys, three_seeds,
                                                                              monkeypatch):
    from bab.__main__ import main
    from bab.report.lanes import run

    monkeypatch.setattr(run.Fingerprints, "__call__", lambda self, notebook: fingerprints())
    folder = tmp_path / "record"
    land(staged_lane(tmp_path, 7), folder, Lane(AG_NEWS, 7), fingerprints())
    assert main(["record", "next", "--folder", str(folder), "--dry-run"]) == 0
    assert "next: 01 seed 7, 03 seed 7" in capsys.readouterr().out
    assert main(["record", "next", "--folder", str(folder), "--only", "02/7,05/13", "--dry-run"]) == 0
    assert "next: 02 seed 7, 05 seed 13" in capsys.readouterr().out
    assert main(["record", "next", "--folder", str(folder), "--only", "02/8"]) == 2
    assert "lanes are named NN/SEED" in capsys.readouterr().err
    assert main(["record", "plan", "--folder", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "02 seed 7    landed" in out and "1 of 21 lanes landed" in out and "1eefc67" in out
    # the two lanes of 02 left, each at the landed lane's core time (2718.5 s, not its 2943.84 s of wall time)
    assert "about 1.5 core-hours for 2 of them" in out and "18 more, of notebooks with no lane landed yet" in out


def test_record_next_refuses_a_job_count_below_one(capsys):
    from bab.__main__ import main

    assert main(["record", "next", "--lanes", "3", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
