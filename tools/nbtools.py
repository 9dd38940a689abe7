"""Shared by the notebook generators: write cells to a notebook and optionally store smoke outputs.

``write_notebook(cells, path, execute=True)`` runs the notebook with papermill at its default
profile (smoke) against an empty run cache, so the stored outputs are what CI's nbval run
recomputes, and strips the timestamps papermill and the kernel add so that a re-run only changes
lines whose content changed.
"""

import os
import tempfile
from pathlib import Path

import nbformat as nbf

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
md = nbf.v4.new_markdown_cell
code = nbf.v4.new_code_cell


def parameters(source: str):
    return code(source, metadata={"tags": ["parameters"]})


def strip_volatile_metadata(nb):
    """Drop run timestamps and durations; keep tags and outputs."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("papermill", None)
    return nb


def write_notebook(cells, name: str, execute: bool) -> Path:
    path = NOTEBOOKS / name
    nb = nbf.v4.new_notebook(cells=cells)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids keep diffs small
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbf.write(nb, path)
    if execute:
        import papermill

        with tempfile.TemporaryDirectory() as cache:
            os.environ.update(BAB_CACHE_DIR=cache, BAB_HEADLESS="1", MPLBACKEND="module://matplotlib_inline.backend_inline")
            papermill.execute_notebook(str(path), str(path), kernel_name="python3", cwd=str(path.parent))
        nbf.write(strip_volatile_metadata(nbf.read(path, as_version=4)), path)
    return path
