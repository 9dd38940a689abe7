"""Landing a finished lane in the record folder, and the record's front page from what has landed.

A lane that ended ok in its staging folder lands by copying what its pages and claims need into the record folder
(each file written beside its target and renamed over it: a reader never sees half a file, and a lane that failed
lands nothing): the executed notebook and its page, the rows (``results/<stem>.json``), their per-example outcomes
(``results/<stem>.outcomes.npz``), the run record (``runs/<stem>.json``); then ``lanes/<stem>.json`` (commit, wall
and CPU seconds, the seconds its models and measurements taken from the run cache cost, machine, fingerprints) and
the front page. The page's and the notebook's figures land as 256-colour PNGs (``bab.report.lanes.palette``).
Weights never land: they stay in the run cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bab.experiments.registry import NOTEBOOKS
from bab.report.lanes.palette import compact_figures
from bab.report.lanes.plan import (
    LANES,
    RECORD_PROFILE,
    Lane,
    LaneState,
    cached_seconds,
    experiment_notebooks,
    notebook_of,
    waiting_for,
)
from bab.report.results.contract import now_iso, read_json, write_json_atomic

LANDED_FILES = ("{stem}.ipynb", "{stem}.html", "runs/{stem}.json", "results/{stem}.json", "results/{stem}.outcomes.npz")


def land(staging: Path, folder: Path, lane: Lane, fingerprints: dict, profile: str = RECORD_PROFILE) -> dict:
    """Copy ``lane``'s files from ``staging`` (where ``run_notebook`` wrote them) into the record ``folder`` and write
    its lane record; returns that record. Raises ValueError when the lane did not end ok (nothing is copied)."""
    staging, folder = Path(staging), Path(folder)
    run = read_json(staging / "runs" / f"{lane.stem}.json")
    if not run or run.get("status") != "ok":
        raise ValueError(f"lane {lane.label} did not end ok in {staging}; nothing landed")
    for pattern in LANDED_FILES:
        source = staging / pattern.format(stem=lane.stem)
        if source.is_file():
            target = folder / pattern.format(stem=lane.stem)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.landing")
            shutil.copyfile(source, partial)
            if target.suffix in (".ipynb", ".html"):
                compact_figures(partial, target.suffix)
            os.replace(partial, target)
    record = {"lane": lane.label, "notebook": lane.notebook.stem, "seed": lane.seed, "profile": profile,
              "commit": run.get("commit"), "seconds": run.get("seconds"),
              "cpu_seconds": run.get("cpu_seconds"), "cached_seconds": cached_seconds(staging, lane),
              "finished_at": run.get("finished_at"),
              "landed_at": now_iso(), "threads": run.get("threads"), "jobs": run.get("jobs"),
              "machine": (run.get("environment") or {}).get("cpu"), "precision": run.get("precision"),
              "fingerprints": fingerprints}
    write_json_atomic(folder / LANES / f"{lane.stem}.json", record)
    return record


def front_page(folder: Path, states: list[LaneState], checkout: Path, profile: str = RECORD_PROFILE) -> Path:
    """Rebuild the record's index.html and results.json from the lanes that have landed: the lane table, and each
    claim judged on the landed rows, or "not run" naming the lanes its rows wait for."""
    from bab.report.pages.index import write_index
    from bab.report.runner.build import discover_notebooks, scrub_machine_paths

    folder = Path(folder)
    for sub in ("runs", "results"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for state in states:  # lanes landed before their figures were compacted (the notebook first: its page stays newer)
        for suffix in (".ipynb", ".html"):
            if (folder / f"{state.lane.stem}{suffix}").is_file():
                compact_figures(folder / f"{state.lane.stem}{suffix}")
    reductions = {notebook.stem: _reductions(notebook, profile) for notebook in NOTEBOOKS}
    lanes = [{**s.as_dict(), "reductions": reductions.get(s.lane.notebook.stem, ())} for s in states]
    owners = experiment_notebooks()
    write_index(folder, profile, discover_notebooks(checkout / "notebooks"), checkout, lanes=lanes,
                claim_view=lambda claim: record_claim(claim, states, owners, reductions))
    scrub_machine_paths(folder, checkout)
    return folder / "index.html"


def record_claim(claim: dict, states: list[LaneState], owners: dict[str, str], reductions: dict) -> dict:
    """A judged claim (its dict) as the record shows it: "not run" while a lane its rows come from has not landed
    (a claim is judged on all of its rows or not at all), and the reductions of its notebooks' record profile against
    the papers' protocols added to its setup."""
    from bab.report.claims import claim_by_id

    experiments = claim_by_id(claim["id"]).experiments()
    notebooks = [stem for stem in dict.fromkeys(notebook_of(e, owners) for e in sorted(experiments)) if stem]
    reduced = [text for stem in notebooks for text in reductions.get(stem, ())]
    if reduced:  # results.json keeps them in full; the page names them once, in its lanes section
        setup = "; ".join(part for part in (claim.get("setup"), "record: " + "; ".join(reduced)) if part)
        shown = "record: the reductions of " + ", ".join(stem[:2] for stem in notebooks if reductions.get(stem))
        own = claim.get("setting") or claim.get("setup")  # what the page's setting column showed before
        claim = {**claim, "setup": setup, "setting": "; ".join(p for p in (own, shown) if p)}
    lanes = waiting_for(notebooks, states)
    if not lanes:
        return claim
    return {**claim, "verdict": "not run", "ours": None, "low": None, "high": None, "covers": None,
            "decided_by": None, "indicative": False, "seeds": None,
            "why": f"waits for lane{'s' if len(lanes) > 1 else ''} {', '.join(lanes)} of the record"}


def _reductions(notebook, profile: str) -> tuple[str, ...]:
    """What the notebook's profile runs less than its paper's protocol (its ``reductions``; () where it names none)."""
    from bab.experiments.profiles import get_profile

    try:
        return tuple(getattr(get_profile(notebook.experiment, profile), "reductions", ()))
    except (KeyError, ValueError):  # a profile this notebook does not define
        return ()


def commit_lane(checkout: Path, folder: Path, lane: Lane, record: dict) -> str:
    """Commit the record folder (what the lane landed and the front page) with a message naming the lane; returns
    the new commit's short hash."""
    minutes = (record.get("seconds") or 0) / 60
    message = (f"record: lane {lane.label} landed ({minutes:.0f} min on {record.get('machine') or 'this machine'}, "
               f"trained at {record.get('commit')})")

    def git(*args):
        done = subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed in {checkout} (the lane has landed in {folder}; commit it "
                               f"by hand): {done.stderr.strip()}")
        return done.stdout

    relative = Path(folder).resolve().relative_to(Path(checkout).resolve())
    git("add", "--", str(relative))
    git("commit", "-q", "-m", message, "--", str(relative))
    return git("rev-parse", "--short", "HEAD").strip()
