"""How the report runs its notebooks: how many at once, threads each, and in which order they start (planned from
the times the last run recorded, or on a fresh clone from the committed times of a whole build,
``reports/planned_seconds.json``; never from seconds typed into code)."""

from __future__ import annotations

import heapq
import itertools
from pathlib import Path

from bab.core.threads import available_cores
from bab.report.results.contract import read_json, write_json_atomic

# Notebooks at once on a 2-core machine, measured: the quick report from an empty cache took 38.3 min as 2 jobs of
# 1 thread and 48.7 min as 1 job of 2 threads (commit 61620cb, README "Run time at quick"); a notebook is only
# 1.38x-1.66x faster on 2 threads than on 1.
DEFAULT_JOBS = 2


def default_jobs(cores: int | None = None) -> int:
    """Notebooks to run at once: ``DEFAULT_JOBS``, or fewer when there are fewer cores."""
    return max(1, min(DEFAULT_JOBS, cores or available_cores()))


def check_jobs(jobs) -> int:
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"--jobs must be a positive whole number of notebooks to run at once, got {jobs!r} "
                         f"(this machine has {available_cores()} cores; e.g. --jobs 1 or --jobs 2)")
    return jobs


def threads_per_job(jobs: int, cores: int | None = None) -> int:
    """The cores divided among ``jobs`` notebooks (at least one thread each)."""
    return max(1, (cores or available_cores()) // jobs)


def check_threads(threads) -> int | None:
    """``threads`` (torch threads per notebook) validated; None means the cores divided among the jobs."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"--threads must be a positive whole number of torch threads per notebook, got "
                         f"{threads!r} (this machine has {available_cores()} cores; e.g. --threads 1)")
    return threads


ORDERS_TRIED_UP_TO = 8  # notebooks; 8! = 40,320 simulated runs take well under a second


def planned_finish(seconds, jobs: int) -> float:
    """When notebooks taking ``seconds`` (in start order) end with ``jobs`` at once, each free job taking the next."""
    free = [0.0] * jobs
    for duration in seconds:
        heapq.heappush(free, heapq.heappop(free) + duration)
    return max(free)


def start_order(runs, previous, jobs: int):
    """``runs`` (``NotebookRun``s) in the order to start them with ``jobs`` at once. Planned only from measured
    runs: a notebook's expected time is its last run in the reports folder (``previous``), and one never run there
    counts as the longest of the others (a new notebook may be long), so it starts first. Where no notebook has
    run before, in notebook order. Otherwise the order whose simulated run (``planned_finish``) ends soonest, ties
    going to the longest first: longest first alone can leave one job with a long tail (at the quick times of
    03254ce it planned 2,456 s, the best order 2,279 s). Beyond ``ORDERS_TRIED_UP_TO`` notebooks: longest first."""
    known = [r["seconds"] if r is not None else None for run, r in zip(runs, previous, strict=True)]
    if all(s is None for s in known):
        return list(runs)
    longest = max(s for s in known if s is not None)
    seconds = {run: longest if s is None else float(s) for run, s in zip(runs, known, strict=True)}
    order = sorted(runs, key=lambda run: (-seconds[run], run.name))
    if jobs == 1 or len(order) > ORDERS_TRIED_UP_TO:
        return order
    return list(min(itertools.permutations(order), key=lambda o: planned_finish([seconds[s] for s in o], jobs)))


# In the reports folder and committed: the seconds of one whole build per profile, so that a clone with no report of
# its own still starts its notebooks in a planned order (with two jobs in notebook order, notebook 05 started last
# and one job ran alone for its last ~12 minutes at quick).
PLAN_FILE = "planned_seconds.json"


def save_plan(reports_dir, profile: str) -> Path:
    """Write the seconds of every run in ``reports/<profile>/runs/`` into ``reports/planned_seconds.json`` under
    ``profile`` (the other profiles' entries kept), each with the commit and jobs x threads it ran at. Refused unless
    every run of that build ended ok: a failed notebook's seconds say nothing about a whole run."""
    reports_dir = Path(reports_dir)
    records = finished_records(reports_dir, profile)
    path = reports_dir / PLAN_FILE
    plan = read_json(path) or {}
    plan[profile] = {stem: {key: r.get(key) for key in ("seconds", "commit", "jobs", "threads")}
                     for stem, r in records.items()}
    write_json_atomic(path, plan)
    return path


def finished_records(reports_dir: Path, profile: str) -> dict[str, dict]:
    """The run records of ``reports/<profile>/runs/`` by stem; refused (FileNotFoundError, ValueError) where there
    are none or one did not end ok."""
    records = {path.stem: read_json(path) for path in sorted((reports_dir / profile / "runs").glob("*.json"))}
    if not records:
        raise FileNotFoundError(f"no runs in {reports_dir / profile / 'runs'}: build the report first "
                                f"(python -m bab report run --profile {profile})")
    failed = [stem for stem, r in records.items() if not isinstance(r, dict) or r.get("status") != "ok"]
    if failed:
        raise ValueError(f"not planning on a build whose runs did not all end ok ({', '.join(failed)}): rebuild them "
                         f"first (python -m bab report run --profile {profile} --only ...)")
    return records


def planned_runs(reports_dir, profile: str, stems) -> list[dict | None]:
    """The committed seconds (``save_plan``) of each of ``stems`` at ``profile``, None where there are none."""
    plan = read_json(Path(reports_dir) / PLAN_FILE)
    entries = plan.get(profile) if isinstance(plan, dict) else None
    if not isinstance(entries, dict):
        return [None] * len(stems)
    return [r if isinstance(r, dict) and isinstance(r.get("seconds"), int | float) else None
            for r in (entries.get(stem) for stem in stems)]


def plan_note(planned) -> str:
    """The line saying a start order came from the committed seconds, and of which commits."""
    commits = sorted({str(r.get("commit")) for r in planned if r is not None})
    return (f"start order planned on the committed seconds of a build at {', '.join(commits)} "
            f"(reports/{PLAN_FILE}): no earlier run here")
