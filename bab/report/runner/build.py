"""Build the HTML report: run the numbered notebooks, convert them, write index.html.

    python -m bab report run --profile smoke|quick|record|paper [--only 01,03] [--jobs N]

Every notebook `notebooks/NN_name.ipynb` is executed with papermill, which injects three
parameters: `profile`, `results_path` and `interactive`. A notebook hands its numbers to the
report by calling `save_results(rows, results_path)`; the report merges them and puts them
next to the papers' own numbers (`bab.report.results.paper.comparison_table`).

Progress: a line per notebook with the last report's run time for it as an estimate, then a line
per code cell as it starts (plain lines, so a log file reads like the terminal):

    [3/6] 03_bert_ag_news ... (last run 212 s)
          cell  4/20  0:12  study = BertStudy(P, progress=False)
    [3/6] 03_bert_ag_news ... ok (215.3 s)

``--jobs N`` runs N notebooks at once, started in the order that should end soonest (``start_order``, from the
last report's times, else from the committed ``reports/planned_seconds.json``), with the cores divided among them
through ``$BAB_THREADS`` (``bab.core.threads``); cell lines then carry the notebook's number. The default is
``default_jobs()``: on 2 cores, 2 jobs of 1 thread each (``DEFAULT_JOBS`` says why).

The new report is built in `reports/.staging-<profile>-<random>/` and swapped into
`reports/<profile>/` only once it is complete, so an interrupted or crashing run never
destroys the previous report.
"""

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from bab.core.blas import describe_preload, kernel_preload, preloaded
from bab.core.device import DEVICE_ENV, default_device, training_device
from bab.core.folders import current_umask, swap_into_place
from bab.core.precision import PRECISION_ENV, check_precision, default_precision
from bab.core.provenance import git_commit
from bab.core.threads import THREADS_ENV, available_cores
from bab.experiments.profiles import PROFILE_NAMES as PROFILES
from bab.experiments.study import refuse_uncommitted_training
from bab.report.pages.index import error_line, run_environment, write_index
from bab.report.results.contract import now_iso, read_json, write_json_atomic
from bab.report.results.record import code_digest, write_record
from bab.report.results.seeds import SEED_SUFFIX, notebook_seeds, seed_stem
from bab.report.runner.progress import (
    CellProgress,
    estimate_line,
    kernel_folder,
    last_run,
    last_run_note,
    progress_engine,
)
from bab.report.runner.schedule import check_jobs, check_threads, plan_note, planned_runs, start_order, threads_per_job

NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
# the inline backend renders figures as PNG outputs without a display; plain Agg would drop them
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_ENV = {"BAB_HEADLESS": "1", "MPLBACKEND": INLINE_BACKEND}

# -----------------------------------------------------------------------------
# which notebooks


def discover_notebooks(notebooks_dir):
    """The numbered notebooks NN_name.ipynb in notebooks_dir, sorted by name."""
    found = sorted(Path(notebooks_dir).glob(NOTEBOOK_GLOB))
    if not found:
        raise ValueError(f"no notebooks matching {NOTEBOOK_GLOB} in {notebooks_dir}")
    return found


def select_notebooks(notebooks, only=None):
    """Keep the notebooks whose two-digit prefix is in `only` ("01,03" or a list); all when None."""
    if only is None:
        return list(notebooks)
    wanted = [p.strip() for p in only.split(",")] if isinstance(only, str) else [str(p).strip() for p in only]
    wanted = [p for p in wanted if p]
    available = sorted({nb.name[:2] for nb in notebooks})
    if not wanted:
        raise ValueError(f"--only selects no notebook; available prefixes: {', '.join(available)}")
    unknown = [p for p in wanted if p not in available]
    if unknown:
        listed = ", ".join(available)
        raise ValueError(f"unknown notebook prefix {unknown[0]!r} in --only; available prefixes: {listed}")
    return [nb for nb in notebooks if nb.name[:2] in wanted]


@dataclass(frozen=True)
class NotebookRun:
    """One execution of a notebook: at its profile's own seed (``seed`` None), or at one of the seeds its profile
    averages (``bab.report.results.seeds``), saved as ``<stem>-seed<N>``."""

    notebook: Path
    seed: int | None = None

    @property
    def stem(self) -> str:
        """The name its page, notebook, results and run record are saved under."""
        return seed_stem(self.notebook.stem, self.seed)

    @property
    def name(self) -> str:
        return f"{self.stem}.ipynb"


def notebook_runs(notebooks, profile, seeds=None) -> list[NotebookRun]:
    """The runs a report makes of ``notebooks``: one each, or one per seed where the profile averages seeds;
    ``seeds`` (a collection of ints) keeps only those seeds' runs, for a record built one seed at a time. Raises
    ValueError for a seed no selected notebook runs at, naming those it does."""
    runs = [NotebookRun(nb, seed) for nb in notebooks for seed in notebook_seeds(nb.stem, profile) or (None,)]
    if seeds is None:
        return runs
    offered = sorted({run.seed for run in runs if run.seed is not None})
    unknown = sorted(set(seeds) - set(offered))
    if unknown or not seeds:
        raise ValueError(f"--seeds {','.join(map(str, seeds))}: the selected notebooks run at profile {profile} at "
                         f"seeds {', '.join(map(str, offered)) or '(none: they run once, at their own seed)'}; "
                         f"give some of those")
    return [run for run in runs if run.seed is None or run.seed in set(seeds)]


def check_profile(profile):
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")


# -----------------------------------------------------------------------------
# running one notebook


@contextlib.contextmanager
def kernel_env(**extra):
    """Set BAB_HEADLESS=1, the inline matplotlib backend and ``extra`` variables for the kernels started
    inside; restore the environment after."""
    variables = {**KERNEL_ENV, **extra}
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def strip_ansi(text):
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def error_info(exc):
    """{"ename", "evalue", "traceback"} for a failed notebook (PapermillExecutionError or any exception)."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        tb = "\n".join(exc.traceback) if isinstance(exc.traceback, list) else str(exc.traceback)
        return {"ename": exc.ename, "evalue": strip_ansi(str(exc.evalue)), "traceback": strip_ansi(tb)}
    return {"ename": type(exc).__name__, "evalue": str(exc), "traceback": "".join(traceback.format_exception(exc))}


def execute_notebook(src, out, profile, results_path, cwd, label="", seed=None, usage=None):
    """Execute src into out with papermill, injecting the report's parameters (and ``seed`` unless None); a line
    per code cell on stdout (prefixed with ``label`` when several notebooks run at once). The kernel's CPU time
    goes into ``usage["cpu_seconds"]`` as it is shut down, even when a cell failed."""
    import papermill

    parameters = {"profile": profile, "results_path": str(results_path), "interactive": False}
    if seed is not None:
        parameters["seed"] = seed
    papermill.execute_notebook(
        str(src),
        str(out),
        parameters=parameters,
        kernel_name="python3",
        **kernel_folder(cwd),
        engine_name=progress_engine(),
        on_cell=CellProgress(indent=f"      {label}"),  # a plain line per cell, in a terminal and in a log
        progress_bar=False,
        log_output=False,
        extra_arguments=["--IPKernelApp.log_level=CRITICAL"],  # quiet kernel start/stop chatter on stderr
        kernel_manager_class=usage_measuring_kernel_manager({} if usage is None else usage),
    )


def usage_measuring_kernel_manager(usage: dict):
    """A kernel manager class that writes its kernel's CPU seconds into ``usage`` as it shuts the kernel down: the
    time the notebook had a core, whatever else ran beside it (its wall time counts the waits too). Asynchronous,
    as nbclient's own default is: under a synchronous manager nbclient never notices a kernel that died (killed for
    memory, say) and waits for its output forever."""
    import psutil
    from jupyter_client.manager import AsyncKernelManager

    class UsageMeasuringKernelManager(AsyncKernelManager):
        async def shutdown_kernel(self, now=False, restart=False):
            with contextlib.suppress(psutil.Error, AttributeError, TypeError):  # a measurement never fails a run
                times = psutil.Process(self.provisioner.pid).cpu_times()
                usage["cpu_seconds"] = round(times.user + times.system + times.children_user + times.children_system,
                                             2)
            return await super().shutdown_kernel(now=now, restart=restart)

    return UsageMeasuringKernelManager


def convert_to_html(ipynb, out):
    """Convert an executed notebook to a self-contained HTML page."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(ipynb), as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
    Path(out).write_text(body, encoding="utf-8")


def run_notebook(src, staging, profile, label="", jobs=1, threads=None, seed=None):
    """Execute one notebook into staging, convert it to HTML, write runs/<stem>.json; return that record.

    ``jobs`` and ``threads`` are recorded: how many notebooks ran at once, and the torch threads each had. With a
    ``seed`` the notebook runs at that seed and everything it writes is named ``<stem>-seed<N>``."""
    stem = seed_stem(src.stem, seed)
    out = staging / f"{stem}.ipynb"
    results_path = (staging / "results" / f"{stem}.json").resolve()
    t0 = time.perf_counter()
    commit = git_commit(src.parent.parent)  # before the run: the code it ran with
    code = code_digest(src)  # RECORD.md marks the run stale once the notebook's code changes
    error, usage = None, {}
    try:
        execute_notebook(src, out, profile, results_path, src.parent.resolve(), label=label, seed=seed, usage=usage)
    except Exception as exc:  # a failed notebook is recorded; KeyboardInterrupt propagates
        error = error_info(exc)
    if out.exists():
        try:
            convert_to_html(out, staging / f"{stem}.html")
        except Exception as exc:
            error = error or error_info(exc)
    record = {
        "notebook": stem,
        "seed": seed,
        "status": "failed" if error else "ok",
        "seconds": round(time.perf_counter() - t0, 2),
        "cpu_seconds": usage.get("cpu_seconds"),  # the kernel's own CPU time
        "error": error,
        "finished_at": now_iso(),
        "commit": commit,
        "jobs": jobs,
        "threads": threads,
        "precision": default_precision(),  # the kernel's, set by build_report
        "device": training_device(),  # where the kernel trained: cpu or cuda
        "code": code,
        "environment": run_environment(),
        **preloaded(os.environ),  # {"blas": ...} where the kernel ran MKL's AVX-512 kernels on an AMD CPU
    }
    write_json_atomic(staging / "runs" / f"{stem}.json", record)
    return record


# -----------------------------------------------------------------------------
# staging and the atomic swap


def make_staging(reports_dir, profile):
    """A fresh, empty staging folder reports/.staging-<profile>-<random>/."""
    reports_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{profile}-", dir=reports_dir))
    os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes 0700; the report is shared like any folder
    return staging


def clear_outputs(staging, stem, seeds=None):
    """Remove a notebook's earlier outputs from staging, those of its seed runs (``<stem>-seed<N>``) included, so a
    failed re-run leaves no stale results and a run at other seeds leaves none of the old seeds behind; with
    ``seeds``, only the outputs of those seeds' runs and of the notebook's unseeded run from before it ran at seeds
    (the other seeds' runs are kept, as ``--seeds`` asks; a notebook is never listed both ways)."""
    names = (stem, f"{stem}{SEED_SUFFIX}*") if seeds is None else [stem] + [seed_stem(stem, s) for s in seeds]
    for name in names:
        for pattern in (f"{name}.ipynb", f"{name}.html", f"runs/{name}.json", f"results/{name}.*"):
            for path in staging.glob(pattern):
                path.unlink()


def build_report(profile, notebooks_dir="notebooks", reports_dir="reports", only=None, jobs=1, threads=None,
                 seeds=None, precision=None, device=None, mkl_override=True):
    """Run the (selected) notebooks and swap a complete new reports/<profile>/ into place.

    ``jobs`` notebooks run at once, each kernel with ``threads`` torch threads (``$BAB_THREADS``; default: the
    cores divided among the jobs). The run cache keys a model by its thread count, so a notebook run alone
    reuses models trained one thread at a time (``BAB_THREADS=1 python -m bab train ...``) only with
    ``threads=1``. ``seeds`` runs the seeded notebooks at only those of their seeds, keeping the other seeds' runs.
    ``precision`` (float32 or bfloat16; default ``$BAB_PRECISION``, else float32) is every training config's
    default precision in the kernels (``bab.core.precision``), recorded in each run's record; ``device`` (auto, cpu or
    cuda; default ``$BAB_DEVICE``, else auto) where they train (``bab.core.device``; every evaluation and benchmark
    runs on the CPU), the device they trained on recorded too. ``mkl_override`` gives the kernels MKL's AVX-512 kernels
    on an AMD CPU (``bab.core.blas``; nothing elsewhere), said in the output and each run's record; False leaves MKL
    alone.
    Returns 0 when every selected notebook succeeded (and the comparison table rendered), else 1.
    Raises ValueError for an unknown profile, --only prefix or --jobs. On an exception or Ctrl-C the
    staging folder is removed and the previous report is left as it was.
    """
    check_profile(profile)
    refuse_uncommitted_training(profile, git_commit(Path(notebooks_dir).resolve().parent), doing="run the report")
    jobs = check_jobs(jobs)
    threads = check_threads(threads)
    precision = default_precision() if precision is None else precision
    check_precision(precision, "precision")
    device = default_device() if device is None else device
    trains_on = training_device(device)  # cuda without a GPU is refused here, before anything runs
    notebooks_dir, reports_dir = Path(notebooks_dir).resolve(), Path(reports_dir).resolve()
    notebooks = discover_notebooks(notebooks_dir)
    selected = notebook_runs(select_notebooks(notebooks, only), profile, seeds)
    jobs = min(jobs, len(selected))
    threads = threads or threads_per_job(jobs)
    final = reports_dir / profile
    staging = make_staging(reports_dir, profile)
    try:
        if only is not None and final.is_dir():  # keep the other notebooks' pages and results
            shutil.copytree(final, staging, dirs_exist_ok=True)
        for stem in dict.fromkeys(run.notebook.stem for run in selected):  # a seeded notebook once, not per seed
            ran = [run.seed for run in selected if run.notebook.stem == stem]
            clear_outputs(staging, stem, None if seeds is None or ran == [None] else ran)
        previous = [last_run(reports_dir, profile, run.stem) for run in selected]
        print(estimate_line(previous, profile), flush=True)
        plan = previous
        if jobs > 1 and all(r is None for r in previous):
            plan = planned_runs(reports_dir, profile, [run.stem for run in selected])
            if any(r is not None for r in plan):
                print(plan_note(plan), flush=True)
        preload = kernel_preload(mkl_override)
        print(f"{jobs} notebook{'s' if jobs > 1 else ''} at once, {threads} torch thread{'s' if threads > 1 else ''} "
              f"each ({available_cores()} cores), training in {precision} on {trains_on}; "
              f"{describe_preload(preload, 'the kernels')}", flush=True)
        t0 = time.perf_counter()
        with kernel_env(**{THREADS_ENV: str(threads), PRECISION_ENV: precision, DEVICE_ENV: device}, **preload):
            failures = run_all_notebooks(selected, previous, plan, staging, profile, jobs, threads)
        print(f"notebooks done in {time.perf_counter() - t0:.0f} s", flush=True)
        table_error = write_index(staging, profile, notebooks, notebooks_dir.parent)
        if table_error:
            print(f"comparison table FAILED: {table_error}", flush=True)
        scrub_machine_paths(staging, notebooks_dir.parent)
        write_record(staging, notebooks_dir)
        swap_into_place(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    print(f"report: {final / 'index.html'} ({len(selected) - failures} ok, {failures} failed)", flush=True)
    return 1 if failures or table_error else 0


def rebuild_pages(folder, notebooks_dir="notebooks") -> Path:
    """Rebuild a report folder's index.html, results.json and RECORD.md from its results/ and runs/ alone (no
    notebook runs): what a change to the claims or the front page does to a committed record. The pages say which
    checkout rebuilt them; each run keeps its own commit. Returns the index's path."""
    folder, notebooks_dir = Path(folder).resolve(), Path(notebooks_dir).resolve()
    previous = read_json(folder / "results.json")
    if previous is None or not (folder / "runs").is_dir():
        raise FileNotFoundError(f"{folder} holds no results.json and runs/: point at a report folder "
                                f"(e.g. reports/paper)")
    profile = previous.get("profile")
    check_profile(profile)
    table_error = write_index(folder, profile, discover_notebooks(notebooks_dir), notebooks_dir.parent)
    if table_error:
        raise ValueError(f"the comparison table failed: {table_error}")
    scrub_machine_paths(folder, notebooks_dir.parent)
    write_record(folder, notebooks_dir)
    return folder / "index.html"


def scrub_machine_paths(folder, checkout, report=None) -> None:
    """Replace this machine's absolute paths in a report's pages and notebooks (papermill records the injected
    ``results_path`` and the input path; the index shows ``$BAB_DATA_DIR``) by names a reader can place:
    ``<report>`` (the report folder the notebooks wrote into: ``report``, by default ``folder`` itself),
    ``$BAB_DATA_DIR``, ``<environment>`` (the Python environment, where it lies outside the checkout) and
    ``<checkout>``. A committed record then says nothing about the machine's folders."""
    replacements = [(str(Path(report if report is not None else folder).resolve()), "<report>")]
    data_dir = os.environ.get("BAB_DATA_DIR")
    if data_dir:
        replacements.append((str(Path(data_dir).resolve()), "$BAB_DATA_DIR"))
    environment = Path(sys.prefix).resolve()  # a virtual environment outside the checkout (a second clone's lanes)
    if sys.prefix != sys.base_prefix and not environment.is_relative_to(Path(checkout).resolve()):
        replacements.append((str(environment), "<environment>"))
    replacements.append((str(Path(checkout).resolve()), "<checkout>"))
    for path in Path(folder).rglob("*"):
        if path.suffix in (".html", ".ipynb", ".json") and path.is_file():
            text = path.read_text(encoding="utf-8")
            scrubbed = text
            for absolute, name in replacements:
                scrubbed = scrubbed.replace(absolute, name)
            if scrubbed != text:
                path.write_text(scrubbed, encoding="utf-8")


def run_all_notebooks(selected, previous, plan, staging, profile, jobs, threads) -> int:
    """Run ``selected`` (``NotebookRun``s) into ``staging``, ``jobs`` at a time; print a line as each starts (with
    its ``previous`` run's time) and ends; return the number that failed. With one job they run in name order, with
    several in the ``start_order`` planned on ``plan`` (the previous runs, or the committed seconds)."""
    numbers = {run: i for i, run in enumerate(selected, 1)}
    before = dict(zip(selected, previous, strict=True))
    order = selected if jobs == 1 else start_order(selected, plan, jobs)
    lock = threading.Lock()

    def one(run):
        tag = f"[{numbers[run]}/{len(selected)}] {run.stem} ..."
        with lock:
            print(f"{tag} {last_run_note(before[run])}", flush=True)
        record = run_notebook(run.notebook, staging, profile, label="" if jobs == 1 else f"{run.name[:2]} ",
                              jobs=jobs, threads=threads, seed=run.seed)
        with lock:
            if record["status"] == "ok":
                print(f"{tag} ok ({record['seconds']:.1f} s)", flush=True)
            else:
                print(f"{tag} FAILED ({record['seconds']:.1f} s): {error_line(record['error'], 200)}", flush=True)
        return record["status"] != "ok"

    if jobs == 1:
        return sum(one(run) for run in order)
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="notebook") as pool:
        futures = [pool.submit(one, run) for run in order]  # the pool starts them in this order
        return sum(future.result() for future in as_completed(futures))
