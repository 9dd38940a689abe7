"""Maintaining notebooks/: the paired jupytext scripts and refreshing the stored smoke outputs.

    python -m bab notebooks refresh [--only 05]

Every notebooks/NN_name.ipynb is paired with a percent-format script NN_name.py (jupytext.toml):
the .ipynb keeps the outputs nbval compares, the .py the same cell sources for diffs, review and
ruff. ``pair_differences`` says where the two disagree (tests/report/test_notebook_pairing.py).

Refresh runs each notebook with papermill at its default profile (smoke) against an empty run
cache, so the stored outputs are what CI's nbval run recomputes. Timestamps papermill and the kernel
add are stripped, so a re-run changes only lines whose content changed; this machine's paths and progress bars
are cleaned from the outputs (``clean_outputs``), and the kernelspec JupyterLab writes is stored, so a
notebook opens unmodified (``opens_unmodified``). A notebook is executed into a temporary file and replaces the
stored one only when it ran without error; a failed one is left as it was and the others still run. Before anything
runs, a notebook whose paired .py was edited (the .py is newer and disagrees) takes the .py's cell sources, as
`jupytext --sync` would; a pair that disagrees with the .ipynb newer stops the refresh. Executing never changes
sources: the pair is checked again, and the .py is touched so that it is not older than its new .ipynb (jupytext in
JupyterLab refuses a pair whose text file is older).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from bab.report.compare.regression import numerics_fingerprint, smoke_kernel_env, store_numerics, store_reference
from bab.report.pages.index import error_line
from bab.report.results.contract import ROWS_DIR_ENV
from bab.report.runner.build import discover_notebooks, error_info, kernel_env, select_notebooks
from bab.report.runner.progress import CellProgress, kernel_folder, progress_engine

DEFAULT_NOTEBOOKS = Path("notebooks")
PAIRED_FORMAT = "py:percent"


# -----------------------------------------------------------------------------
# the .ipynb / .py pairs


def paired_script(ipynb) -> Path:
    """notebooks/NN_name.ipynb -> notebooks/NN_name.py"""
    return Path(ipynb).with_suffix(".py")


def read_cells(path) -> list:
    """The cells of a notebook (.ipynb) or of its percent-format script (.py), read by jupytext."""
    import jupytext

    path = Path(path)
    return jupytext.read(path, fmt=PAIRED_FORMAT if path.suffix == ".py" else None).cells


def _first_difference(a: str, b: str) -> str:
    for n, (x, y) in enumerate(itertools.zip_longest(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return f"line {n}: {x!r} vs {y!r}"
    return "line endings differ"


def pair_differences(ipynb, script=None) -> list[str]:
    """Where ``ipynb`` and its paired .py (or ``script``) disagree: cells, kinds, sources, tags. [] when they agree."""
    ipynb = Path(ipynb)
    script = paired_script(ipynb) if script is None else Path(script)
    if not script.exists():
        return [f"{script.name} is missing: create it with `jupytext --sync {ipynb}` (jupytext.toml pairs them)"]
    differences = []
    cells = itertools.zip_longest(read_cells(ipynb), read_cells(script))
    for n, (a, b) in enumerate(cells, 1):
        if a is None or b is None:
            differences.append(f"cell {n}: only in {(script if a is None else ipynb).name}")
        elif a.cell_type != b.cell_type:
            differences.append(f"cell {n}: {a.cell_type} in {ipynb.name}, {b.cell_type} in {script.name}")
        elif a.source.rstrip("\n") != b.source.rstrip("\n"):  # the text format drops a code cell's final newline
            differences.append(f"cell {n} ({a.cell_type}) source differs, {_first_difference(a.source, b.source)}")
        elif a.metadata.get("tags", []) != b.metadata.get("tags", []):
            differences.append(f"cell {n}: tags {a.metadata.get('tags', [])} vs {b.metadata.get('tags', [])}")
    return differences


def sync_from_script(ipynb) -> None:
    """Copy the paired .py's cell sources into ``ipynb``, keeping its outputs, cell ids and tags.

    This is `jupytext --sync` on a pair whose .py is the newer file (jupytext.toml must pair them).
    """
    from jupytext.cli import jupytext as jupytext_cli

    jupytext_cli(["--sync", "--quiet", str(paired_script(ipynb))])


def prepare_pairs(notebooks) -> None:
    """Before a refresh: every notebook with a paired .py agrees with it.

    A pair whose .py is the newer file (edited in an editor) is synced from the .py first, the way
    JupyterLab with jupytext would. A pair whose .ipynb is newer and disagrees raises ValueError: which
    side holds the wanted edit is not clear, and nothing has run yet.
    """
    for ipynb in notebooks:
        script = paired_script(ipynb)
        if not script.exists() or not pair_differences(ipynb):
            continue
        if script.stat().st_mtime > ipynb.stat().st_mtime:
            sync_from_script(ipynb)
            print(f"{ipynb.name}: cell sources taken from the newer {script.name} (jupytext --sync)", flush=True)
        differences = pair_differences(ipynb)
        if differences:
            raise ValueError(
                f"{ipynb.name} and {script.name} disagree ({differences[0]}; {len(differences)} difference(s) in "
                f"all) and the .ipynb is the newer file. To keep the notebook's sources: `jupytext --sync {ipynb}`; "
                f"to keep the script's: `touch {script}` first. Then refresh again"
            )


# -----------------------------------------------------------------------------
# refresh


def strip_volatile_metadata(nb):
    """Drop run timestamps and durations, and the empty tags papermill adds; keep real tags and outputs."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("papermill", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    return nb


def opens_unmodified(nb, kernel_name: str = "python3"):
    """The metadata JupyterLab writes as it opens a notebook, stored already, so a tab opens unmodified: the
    kernelspec of the kernel it starts (a differing one, e.g. papermill's "Python 3" against ipykernel's "Python 3
    (ipykernel)", or none, is replaced as the kernel starts, which marks the tab modified before the reader did
    anything), and no widget state that no output shows (the models of a progress bar the outputs dropped)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    with contextlib.suppress(NoSuchKernel):
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
        nb.metadata["kernelspec"] = {"display_name": spec.display_name, "language": spec.language, "name": kernel_name}
    shown = any("application/vnd.jupyter.widget-view+json" in (output.get("data") or {})
                for cell in nb.cells for output in cell.get("outputs", []))
    if not shown:
        nb.metadata.pop("widgets", None)
    return nb


# a progress bar's text as tqdm draws it: "  0%|          | 0/272 [00:00<?, ?it/s]"
_PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")


def clean_outputs(nb, checkout=None):
    """Stored outputs a reader on another machine can read: this machine's paths replaced by neutral names
    (``bab.report.pages.notebook_pages.scrub_paths``: the data folder as ``$BAB_DATA_DIR``, installed packages as
    ``site-packages/...``, the checkout's files relative to it) and progress bars dropped (a bar stored mid-way
    shows a frozen 0% to every reader)."""
    from bab.report.pages.notebook_pages import scrub_paths

    def is_bar(output) -> bool:
        text = output.get("text") or (output.get("data") or {}).get("text/plain") or ""
        text = "".join(text) if isinstance(text, list) else text
        return bool(_PROGRESS_BAR.search(text))

    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if is_bar(output):
                continue
            if "text" in output:
                output["text"] = scrub_paths("".join(output["text"]) if isinstance(output["text"], list)
                                             else output["text"], checkout)
            for kind, value in (output.get("data") or {}).items():
                if kind.startswith("text/"):
                    output["data"][kind] = scrub_paths("".join(value) if isinstance(value, list) else value,
                                                       checkout)
            kept.append(output)
        cell["outputs"] = kept
    return nb


def refresh_notebook(path, cache_dir, on_cell=None) -> float:
    """Execute ``path`` at profile smoke with run cache ``cache_dir``; store its outputs in place, and the result
    rows it saves as its entry of the smoke regression reference (``bab.report.compare.regression``). Seconds taken.

    On any error the stored notebook (and its .py) and its reference rows stay as they were.
    """
    import nbformat
    import papermill

    path = Path(path).resolve()
    script = paired_script(path)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        rows_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bab-refresh-rows-")))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=path.parent, prefix=".refresh-")))
        stack.enter_context(kernel_env(BAB_CACHE_DIR=str(cache_dir), **smoke_kernel_env(),
                                       **{ROWS_DIR_ENV: str(rows_dir)}))
        out = tmp / path.name
        papermill.execute_notebook(str(path), str(out), kernel_name="python3",
                                   **kernel_folder(path.parent),
                                   engine_name=progress_engine(), on_cell=on_cell, progress_bar=False,
                                   extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
        executed = strip_volatile_metadata(nbformat.read(out, as_version=4))
        nbformat.write(opens_unmodified(clean_outputs(executed, path.parent.parent)), out)
        if script.exists():
            differences = pair_differences(out, script)
            if differences:
                raise RuntimeError(f"the executed notebook's sources differ from {script.name}: {differences[0]}")
        os.replace(out, path)
        if script.exists():
            os.utime(script)  # same sources; not older than the new .ipynb
        for rows_file in sorted(rows_dir.glob("*.json")):
            store_reference(rows_file.stem, json.loads(rows_file.read_text())["rows"])
            store_numerics(rows_file.stem, numerics_fingerprint())
    return time.perf_counter() - start


def refresh(notebooks_dir=DEFAULT_NOTEBOOKS, only=None) -> dict[str, float | None]:
    """Refresh every numbered notebook (or those whose prefixes are in ``only``) from one empty run cache.

    Returns {stem: seconds}, None for a notebook that failed (its stored file is unchanged).
    Raises ValueError before running anything when a notebook and its paired .py disagree and the
    .py is not the newer file (a newer .py is synced into the notebook first: ``prepare_pairs``).
    """
    notebooks = select_notebooks(discover_notebooks(Path(notebooks_dir)), only)
    prepare_pairs(notebooks)
    times = {}
    with tempfile.TemporaryDirectory(prefix="bab-refresh-cache-") as cache:
        for i, path in enumerate(notebooks, 1):
            tag = f"[{i}/{len(notebooks)}] {path.stem} ..."
            print(tag, flush=True)
            t0 = time.perf_counter()
            try:
                times[path.stem] = refresh_notebook(path, Path(cache), on_cell=CellProgress())
                print(f"{tag} stored ({times[path.stem]:.0f} s)", flush=True)
            except Exception as exc:  # the stored notebook is unchanged; go on with the others
                times[path.stem] = None
                seconds = time.perf_counter() - t0
                print(f"{tag} FAILED ({seconds:.0f} s), stored notebook unchanged: {error_line(error_info(exc), 200)}",
                      flush=True)
    return times


def add_refresh_arguments(parser) -> None:
    parser.add_argument("--only", default=None, help="comma-separated two-digit notebook prefixes, e.g. 05 or 01,03")
    parser.add_argument("--notebooks-dir", default=str(DEFAULT_NOTEBOOKS))


def run_refresh(args) -> int:
    """0 when every selected notebook was refreshed, 1 when one failed."""
    try:
        times = refresh(args.notebooks_dir, args.only)
    except KeyboardInterrupt:
        print("\ninterrupted: the notebook that was running was left as it was", file=sys.stderr)
        return 130
    failed = [stem for stem, seconds in times.items() if seconds is None]
    if failed:
        print(f"refresh FAILED for {', '.join(failed)}; those notebooks were left as they were", flush=True)
        return 1
    return 0
