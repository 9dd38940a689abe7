"""Build the HTML report: run the numbered notebooks, convert them, write index.html.

    python -m bab report --profile smoke|quick|paper [--only 01,03]

Every notebook `notebooks/NN_name.ipynb` is executed with papermill, which injects three
parameters: `profile`, `results_path` and `interactive`. A notebook hands its numbers to the
report by calling `save_results(rows, results_path)`; the report merges them and puts them
next to the papers' own numbers (`bab.report.paper.comparison_table`).

Progress: a line per notebook with the last report's run time for it as an estimate, then a line
per code cell as it starts (plain lines, so a log file reads like the terminal):

    [3/6] 03_bert_ag_news ... (last run 212 s)
          cell  4/20  0:12  study = BertStudy(P, progress=False)
    [3/6] 03_bert_ag_news ... ok (215.3 s)

The new report is built in `reports/.staging-<profile>-<random>/` and swapped into
`reports/<profile>/` only once it is complete, so an interrupted or crashing run never
destroys the previous report.
"""

import argparse
import contextlib
import datetime
import functools
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bab.experiments.profiles import PROFILE_NAMES as PROFILES
from bab.report.results import current_umask, write_json_atomic

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


def one_line(error, limit=200):
    text = f"{error['ename']}: {error['evalue']}".strip()
    text = text.splitlines()[0] if text else "error"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -----------------------------------------------------------------------------
# progress a person can follow, in a terminal and in a log file alike

PROGRESS_ENGINE = "bab-cell-progress"


@functools.cache
def progress_engine():
    """Register papermill's nbclient engine with a hook: ``on_cell(cell, index, cells)`` as each cell starts.

    papermill's own progress bar is tqdm, which redraws one line with carriage returns: fine in a
    terminal, unreadable in a log. The hook lets CellProgress print a plain line per code cell instead.
    """
    from papermill.engines import NBClientEngine, papermill_engines

    class CellProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, on_cell=None, **kwargs):
            if on_cell is not None:
                start = nb_man.cell_start

                def cell_start(cell, cell_index=None, **kw):
                    with contextlib.suppress(Exception):  # a progress line never fails a notebook
                        on_cell(cell, cell_index, nb_man.nb.cells)
                    return start(cell, cell_index, **kw)

                nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register(PROGRESS_ENGINE, CellProgressEngine)
    return PROGRESS_ENGINE


def cell_summary(source, width=70):
    """The first line of a cell worth showing (not blank, not an nbval marker), shortened to ``width``."""
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith("# NBVAL_"):
            return line if len(line) <= width else line[: width - 1] + "…"
    return ""


class CellProgress:
    """``on_cell`` callback: one line per code cell as it starts, numbered like the notebook's In [n].

        cell  4/20  0:12  study = BertStudy(P, progress=False)

    (code cell 4 of 20 starts 12 s into the notebook). Plain lines, so a log file stays readable.
    """

    def __init__(self, indent="      ", stream=None):
        self.indent, self.stream = indent, stream
        self.start = time.perf_counter()

    def __call__(self, cell, index, cells):
        if cell.cell_type != "code":
            return
        number = sum(c.cell_type == "code" for c in cells[: index + 1])
        total = sum(c.cell_type == "code" for c in cells)
        elapsed = int(time.perf_counter() - self.start)
        line = f"{self.indent}cell {number:>2}/{total}  {elapsed // 60}:{elapsed % 60:02d}  {cell_summary(cell.source)}"
        print(line.rstrip(), file=self.stream or sys.stdout, flush=True)


def format_seconds(seconds):
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def last_run(reports_dir, profile, stem):
    """The record runs/<stem>.json of the current reports/<profile>/ (the last report), or None."""
    record = read_json(Path(reports_dir) / profile / "runs" / f"{stem}.json")
    if isinstance(record, dict) and isinstance(record.get("seconds"), int | float):
        return record
    return None


def last_run_note(record):
    """The estimate shown for a notebook, e.g. "(last run 212 s)"; says so when that run failed or there was none."""
    if record is None:
        return "(no previous run)"
    if record.get("status") == "ok":
        return f"(last run {format_seconds(record['seconds'])})"
    return f"(last run failed after {format_seconds(record['seconds'])})"


def estimate_line(records, profile):
    """One line before the run: how long the selected notebooks took in the last report."""
    known = [r for r in records if r is not None and r.get("status") == "ok"]
    n = len(records)
    head = f"running {n} notebook{'s' if n != 1 else ''} at profile {profile}"
    if not known:
        return f"{head}; no earlier successful runs to estimate from"
    total = format_seconds(sum(r["seconds"] for r in known))
    if len(known) == n:
        return f"{head}; the last report took {total} for them"
    return f"{head}; the last report took {total} for the {len(known)} of them that ran ok"


def execute_notebook(src, out, profile, results_path, cwd):
    """Execute src into out with papermill, injecting the report's parameters; a line per code cell on stdout."""
    import papermill

    papermill.execute_notebook(
        str(src),
        str(out),
        parameters={"profile": profile, "results_path": str(results_path), "interactive": False},
        kernel_name="python3",
        cwd=str(cwd),
        engine_name=progress_engine(),
        on_cell=CellProgress(),  # a plain line per cell, in a terminal and in a log
        progress_bar=False,
        log_output=False,
        extra_arguments=["--IPKernelApp.log_level=CRITICAL"],  # quiet kernel start/stop chatter on stderr
    )


def convert_to_html(ipynb, out):
    """Convert an executed notebook to a self-contained HTML page."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(ipynb), as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
    Path(out).write_text(body, encoding="utf-8")


def run_notebook(src, staging, profile):
    """Execute one notebook into staging, convert it to HTML, write runs/<stem>.json; return that record."""
    stem = src.stem
    out = staging / f"{stem}.ipynb"
    results_path = (staging / "results" / f"{stem}.json").resolve()
    t0 = time.perf_counter()
    error = None
    try:
        with kernel_env():
            execute_notebook(src, out, profile, results_path, src.parent.resolve())
    except Exception as exc:  # a failed notebook is recorded; KeyboardInterrupt propagates
        error = error_info(exc)
    if out.exists():
        try:
            convert_to_html(out, staging / f"{stem}.html")
        except Exception as exc:
            error = error or error_info(exc)
    record = {
        "notebook": stem,
        "status": "failed" if error else "ok",
        "seconds": round(time.perf_counter() - t0, 2),
        "error": error,
        "finished_at": now_iso(),
    }
    write_json_atomic(staging / "runs" / f"{stem}.json", record)
    return record


# -----------------------------------------------------------------------------
# the index page


def now_iso():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def read_json(path):
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(Path(path).read_text())
    return None


def collect_runs(staging, notebooks):
    """One record per notebook (and per earlier run record without a notebook file), 'not run' if none."""
    stems = [nb.stem for nb in notebooks]
    stems += sorted(p.stem for p in (staging / "runs").glob("*.json") if p.stem not in stems)
    runs = []
    for stem in stems:
        record = read_json(staging / "runs" / f"{stem}.json") or {
            "notebook": stem,
            "status": "not run",
            "seconds": None,
            "error": None,
            "finished_at": None,
        }
        record["html"] = f"{stem}.html" if (staging / f"{stem}.html").exists() else None
        runs.append(record)
    return runs


def collect_results(staging):
    """{stem: rows} from every results/<stem>.json in the staging folder."""
    results = {}
    for path in sorted((staging / "results").glob("*.json")):
        data = read_json(path)
        if data is not None:
            results[path.stem] = data.get("rows", [])
    return results


def comparison_html(rows):
    """The paper-vs-reproduction table as HTML via bab.report.paper.comparison_table; (html, error)."""
    try:
        paper = importlib.import_module("bab.report.paper")
        table = paper.comparison_table(rows)
        text = table.to_html(index=False, na_rep="–", float_format=lambda x: f"{x:.4g}", border=0, classes="data")
        return text, None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_name():
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_commit(cwd):
    with contextlib.suppress(Exception):
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return "unknown"


def environment_info(profile, repo_dir):
    """Versions and machine facts shown at the bottom of the index page."""
    return {
        "profile": profile,
        "python": platform.python_version(),
        "torch": dist_version("torch"),
        "transformers": dist_version("transformers"),
        "bab": dist_version("bab"),
        "git commit": git_commit(repo_dir),
        "platform": platform.platform(),
        "cpu": f"{cpu_name()} ({os.cpu_count()} logical cores)",
        "BAB_DATA_DIR": os.environ.get("BAB_DATA_DIR", "(unset)"),
    }


INDEX_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>bab report – {{ profile }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.ok { color: #176117; font-weight: bold; } .failed { color: #a11; font-weight: bold; }
.not-run { color: #777; }
pre { white-space: pre-wrap; max-height: 30em; overflow: auto; background: #fafafa;
      margin: 0.3em 0; font-size: 0.85em; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>bab reproduction report — profile <code>{{ profile }}</code></h1>
<p class="muted">Generated {{ generated_at }}. {{ n_ok }} ok, {{ n_failed }} failed, {{ n_not_run }} not run.
Merged results: <a href="results.json">results.json</a>.</p>

<h2>Notebooks</h2>
<table>
<tr><th>notebook</th><th>status</th><th>run time</th><th>finished</th><th>error</th></tr>
{% for r in runs %}
<tr>
<td>{% if r.html %}<a href="{{ r.html }}">{{ r.notebook }}</a>{% else %}{{ r.notebook }}{% endif %}</td>
<td class="{{ r.status | replace(' ', '-') }}">{{ r.status }}</td>
<td>{% if r.seconds is not none %}{{ '%.1f' | format(r.seconds) }} s{% endif %}</td>
<td>{{ r.finished_at or '' }}</td>
<td>{% if r.error %}<pre>{{ r.error.ename }}: {{ r.error.evalue }}</pre>
<details><summary>traceback</summary><pre>{{ r.error.traceback }}</pre></details>{% endif %}</td>
</tr>
{% endfor %}
</table>

<h2>Paper vs reproduction</h2>
{% if table_html %}{{ table_html | safe }}{% else %}
<p class="failed">Comparison table unavailable:</p><pre>{{ table_error }}</pre>{% endif %}

<h2>Environment</h2>
<table>
{% for k, v in env.items() %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>
{% endfor %}
</table>
</body>
</html>
"""


def render_index(profile, generated_at, runs, table_html, table_error, env):
    """The index page as a string (jinja2, autoescaped)."""
    import jinja2

    template = jinja2.Environment(autoescape=True).from_string(INDEX_TEMPLATE)
    count = lambda status: sum(r["status"] == status for r in runs)  # noqa: E731
    return template.render(
        profile=profile,
        generated_at=generated_at,
        runs=runs,
        table_html=table_html,
        table_error=table_error,
        env=env,
        n_ok=count("ok"),
        n_failed=count("failed"),
        n_not_run=count("not run"),
    )


def write_index(staging, profile, notebooks, repo_dir):
    """Write index.html and results.json into staging; return the comparison-table error (or None)."""
    generated_at = now_iso()
    runs = collect_runs(staging, notebooks)
    results = collect_results(staging)
    rows = [row for stem_rows in results.values() for row in stem_rows]
    table_html, table_error = comparison_html(rows)
    merged = {
        "profile": profile,
        "generated_at": generated_at,
        "notebooks": {r["notebook"]: r["status"] for r in runs},
        "rows": [{"notebook": stem, **row} for stem, stem_rows in results.items() for row in stem_rows],
    }
    write_json_atomic(staging / "results.json", merged)
    page = render_index(profile, generated_at, runs, table_html, table_error, environment_info(profile, repo_dir))
    (staging / "index.html").write_text(page, encoding="utf-8")
    return table_error


# -----------------------------------------------------------------------------
# staging and the atomic swap


def make_staging(reports_dir, profile):
    """A fresh, empty staging folder reports/.staging-<profile>-<random>/."""
    reports_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{profile}-", dir=reports_dir))
    os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes 0700; the report is shared like any folder
    return staging


def clear_outputs(staging, stem):
    """Remove a notebook's earlier outputs from staging, so a failed re-run leaves no stale results."""
    for path in (
        staging / f"{stem}.ipynb",
        staging / f"{stem}.html",
        staging / "runs" / f"{stem}.json",
        staging / "results" / f"{stem}.json",
    ):
        path.unlink(missing_ok=True)


def swap_into_place(staging, final):
    """Move the complete staging folder to `final`; the old report is removed only afterwards."""
    aside = None
    if final.exists():
        aside = final.with_name(f".old-{final.name}-{os.getpid()}-{time.time_ns()}")
        os.rename(final, aside)
    try:
        os.rename(staging, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def build_report(profile, notebooks_dir="notebooks", reports_dir="reports", only=None):
    """Run the (selected) notebooks and swap a complete new reports/<profile>/ into place.

    Returns 0 when every selected notebook succeeded (and the comparison table rendered), else 1.
    Raises ValueError for an unknown profile or --only prefix. On an exception or Ctrl-C the
    staging folder is removed and the previous report is left as it was.
    """
    check_profile(profile)
    notebooks_dir, reports_dir = Path(notebooks_dir).resolve(), Path(reports_dir).resolve()
    notebooks = discover_notebooks(notebooks_dir)
    selected = select_notebooks(notebooks, only)
    final = reports_dir / profile
    staging = make_staging(reports_dir, profile)
    try:
        if only is not None and final.is_dir():  # keep the other notebooks' pages and results
            shutil.copytree(final, staging, dirs_exist_ok=True)
        failures = 0
        previous = [last_run(reports_dir, profile, src.stem) for src in selected]
        print(estimate_line(previous, profile), flush=True)
        for i, (src, before) in enumerate(zip(selected, previous, strict=True), 1):
            tag = f"[{i}/{len(selected)}] {src.stem} ..."
            print(f"{tag} {last_run_note(before)}", flush=True)
            clear_outputs(staging, src.stem)
            record = run_notebook(src, staging, profile)
            if record["status"] == "ok":
                print(f"{tag} ok ({record['seconds']:.1f} s)", flush=True)
            else:
                failures += 1
                print(f"{tag} FAILED ({record['seconds']:.1f} s): {one_line(record['error'])}", flush=True)
        table_error = write_index(staging, profile, notebooks, notebooks_dir.parent)
        if table_error:
            print(f"comparison table FAILED: {table_error}", flush=True)
        swap_into_place(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    print(f"report: {final / 'index.html'} ({len(selected) - failures} ok, {failures} failed)", flush=True)
    return 1 if failures or table_error else 0


# -----------------------------------------------------------------------------
# command line


def add_arguments(parser):
    """The options of `python -m bab report`."""
    parser.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)} (default: quick)")
    parser.add_argument("--only", default=None, help="comma-separated two-digit notebook prefixes, e.g. 01,03")
    parser.add_argument("--reports-dir", default="reports")
    parser.add_argument("--notebooks-dir", default="notebooks")


def run(args):
    """Build the report for parsed ``args``; return the exit code."""
    try:
        return build_report(args.profile, args.notebooks_dir, args.reports_dir, only=args.only)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the previous report was kept", file=sys.stderr)
        return 130


def main(argv=None):
    """`python -m bab report ...`: parse arguments, build the report, return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m bab report", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
