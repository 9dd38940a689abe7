"""Maintaining notebooks/: refresh the stored smoke outputs that nbval compares.

    python -m bab notebooks refresh [--only 05]

Each notebook runs with papermill at its default profile (smoke) against an empty run cache,
so the stored outputs are what CI's nbval run recomputes. Timestamps papermill and the kernel
add are stripped, so a re-run changes only lines whose content changed. A notebook is executed
into a temporary file and replaces the stored one only when it ran without error.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from bab.report.build import KERNEL_ENV, discover_notebooks, select_notebooks

DEFAULT_NOTEBOOKS = Path("notebooks")


def strip_volatile_metadata(nb):
    """Drop run timestamps and durations; keep tags and outputs."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("papermill", None)
    return nb


def refresh_notebook(path: Path, cache_dir: Path, progress: bool = False) -> float:
    """Execute ``path`` at profile smoke with run cache ``cache_dir``; store its outputs in place. Seconds taken."""
    import nbformat
    import papermill

    path = Path(path).resolve()
    start = time.perf_counter()
    saved = {k: os.environ.get(k) for k in (*KERNEL_ENV, "BAB_CACHE_DIR")}
    os.environ.update(KERNEL_ENV, BAB_CACHE_DIR=str(cache_dir))
    try:
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".refresh-") as tmp:
            out = Path(tmp) / path.name
            papermill.execute_notebook(str(path), str(out), kernel_name="python3", cwd=str(path.parent),
                                       progress_bar=progress, extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
            nbformat.write(strip_volatile_metadata(nbformat.read(out, as_version=4)), out)
            os.replace(out, path)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return time.perf_counter() - start


def refresh(notebooks_dir=DEFAULT_NOTEBOOKS, only=None, progress: bool = False) -> dict[str, float]:
    """Refresh every numbered notebook (or those whose prefixes are in ``only``) from one empty run cache."""
    notebooks = select_notebooks(discover_notebooks(Path(notebooks_dir)), only)
    times = {}
    with tempfile.TemporaryDirectory(prefix="bab-refresh-cache-") as cache:
        for i, path in enumerate(notebooks, 1):
            print(f"[{i}/{len(notebooks)}] {path.stem} ...", end=" ", flush=True)
            times[path.stem] = refresh_notebook(path, Path(cache), progress)
            print(f"{times[path.stem]:.0f} s", flush=True)
    return times


def add_refresh_arguments(parser) -> None:
    parser.add_argument("--only", default=None, help="comma-separated two-digit notebook prefixes, e.g. 05 or 01,03")
    parser.add_argument("--notebooks-dir", default=str(DEFAULT_NOTEBOOKS))


def run_refresh(args) -> int:
    refresh(args.notebooks_dir, args.only, progress=sys.stderr.isatty())
    return 0
