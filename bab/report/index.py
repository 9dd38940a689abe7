"""The report's front page: every notebook's status and run time, the papers' numbers beside ours, the machine.

``write_index`` merges the notebooks' result rows into ``results.json`` and renders ``index.html``
from ``template.html`` (jinja2, autoescaped).
"""

import contextlib
import importlib
import importlib.metadata
import os
import platform
import subprocess
from importlib import resources
from pathlib import Path

from bab.report.results import now_iso, read_json, write_json_atomic


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
            "commit": None,
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
    """The checkout's commit (short hash), with "+dirty" when tracked files outside reports/ differ from it
    (the code that ran is then not the commit's); "unknown" outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)

    with contextlib.suppress(Exception):
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode == 0:
            # reports/ is left out: a committed report folder changes with every run, not the code
            changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)reports")
            dirty = changed.returncode == 0 and changed.stdout.strip()
            return head.stdout.strip() + ("+dirty" if dirty else "")
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




def render_index(profile, generated_at, runs, table_html, table_error, env):
    """The index page as a string (jinja2, autoescaped)."""
    import jinja2

    source = resources.files("bab.report").joinpath("template.html").read_text(encoding="utf-8")
    template = jinja2.Environment(autoescape=True).from_string(source)
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
