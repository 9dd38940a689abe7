"""Running lanes: each in its own staging folder, one torch thread, ``jobs`` at once, landing as each ends.

The kernels train in float32 on the CPU (the record is made on this project's own machines) with MKL's kernels as
``python -m bab report run`` gives them (``bab.core.blas``). A lane that fails lands nothing and keeps its staging
folder (``reports/.staging-record-<stem>-*``) for its traceback; the others go on. The fingerprints are taken once,
before any lane starts, from the checkout the kernels run (which must be clean: every lane names its commit).
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from bab.report.lanes.plan import RECORD_PROFILE, Lane, lane_states, record_lanes


class Fingerprints:
    """Each notebook's lane fingerprints at a checkout, computed on first use."""

    def __init__(self, checkout: Path, profile: str = RECORD_PROFILE):
        self.checkout, self.profile, self._objectives, self._by_notebook = Path(checkout), profile, None, {}

    def __call__(self, notebook) -> dict:
        from bab.report.lanes.fingerprints import lane_fingerprints, objective_summaries

        if notebook.stem not in self._by_notebook:
            if self._objectives is None:
                self._objectives = objective_summaries(self.checkout)
            self._by_notebook[notebook.stem] = lane_fingerprints(notebook, self.profile, self._objectives)
        return self._by_notebook[notebook.stem]


def run_lanes(lanes: list[Lane], checkout: Path, folder: Path, jobs: int = 2, commit: bool = False,
              mkl_override: bool = True, profile: str = RECORD_PROFILE) -> int:
    """Run ``lanes`` from the notebooks of ``checkout`` at ``profile`` (the record's; another one only to try the
    machinery) and land each that ends ok in ``folder`` (committing it when ``commit``); returns the number that
    failed."""
    from bab.core.blas import describe_preload, kernel_preload
    from bab.core.device import DEVICE_ENV
    from bab.core.precision import PRECISION_ENV
    from bab.core.provenance import git_commit
    from bab.core.threads import THREADS_ENV
    from bab.experiments.study import refuse_uncommitted_training
    from bab.report.lanes.landing import commit_lane, front_page, land
    from bab.report.pages.index import error_line, wall_time
    from bab.report.runner.build import kernel_env, make_staging, run_notebook, scrub_machine_paths

    checkout, folder = Path(checkout).resolve(), Path(folder).resolve()
    refuse_uncommitted_training(profile, git_commit(checkout), doing="run the record's lanes")
    fingerprints = Fingerprints(checkout, profile)
    for lane in lanes:  # before any lane starts: the code the kernels will load
        fingerprints(lane.notebook)
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            print(text, flush=True)

    def one(lane: Lane) -> int:
        staging = make_staging(folder.parent, f"{profile}-{lane.stem}")
        say(f"[{lane.label}] {lane.stem} ... (staging {staging.name})")
        record = run_notebook(checkout / "notebooks" / f"{lane.notebook.stem}.ipynb", staging, profile,
                              label=f"{lane.notebook.number}/{lane.seed} ", jobs=jobs, threads=1, seed=lane.seed)
        if record["status"] != "ok":
            say(f"[{lane.label}] FAILED after {wall_time(record['seconds'])}: {error_line(record['error'], 200)}; "
                f"its traceback is in {staging}")
            return 1
        scrub_machine_paths(staging, checkout)
        with lock:
            landed = land(staging, folder, lane, fingerprints(lane.notebook), profile)
            front_page(folder, lane_states(folder, fingerprints, record_lanes()), checkout, profile)
            committed = f", committed {commit_lane(checkout, folder, lane, landed)}" if commit else ""
            print(f"[{lane.label}] landed in {folder.name}/ ({wall_time(record['seconds'])}{committed})", flush=True)
        shutil.rmtree(staging, ignore_errors=True)
        return 0

    preload = kernel_preload(mkl_override)
    print(f"{len(lanes)} lane{'s' if len(lanes) != 1 else ''}, {min(jobs, len(lanes))} at once, one torch thread "
          f"each, float32 on the CPU; {describe_preload(preload, 'the kernels')}", flush=True)
    t0 = time.perf_counter()
    with kernel_env(**{THREADS_ENV: "1", PRECISION_ENV: "float32", DEVICE_ENV: "cpu"}, **preload):
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(lanes))), thread_name_prefix="lane") as pool:
            failures = sum(future.result() for future in as_completed([pool.submit(one, lane) for lane in lanes]))
    print(f"{len(lanes) - failures} landed, {failures} failed, in {wall_time(time.perf_counter() - t0)}", flush=True)
    return failures
