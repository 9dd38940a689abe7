"""The notebooks' stored outputs read the same on any machine: no paths of the machine that stored them, no progress
bars frozen mid-way."""

import re
from pathlib import Path

import nbformat
import pytest

from bab.report.runner.notebooks import clean_outputs, opens_unmodified

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.~$<])/(?:home|root|tmp|work|usr|opt|var)/|\.venv/")
BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")
# what JupyterLab writes for the kernel it starts: ipykernel's own kernelspec
INSTALLED_KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _texts(nb):
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                yield cell, output["text"]
            for kind, value in (output.get("data") or {}).items():
                if kind.startswith("text/"):
                    yield cell, value


def test_clean_outputs_replaces_paths_and_drops_progress_bars(monkeypatch, tmp_path):
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path / "data"))
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"data from {tmp_path / 'data'}/ag_news\n"),
        nbformat.v4.new_output("stream", name="stdout",
                               text=f"model: {tmp_path}/checkout/.venv/lib/python3.11/site-packages/pkg/model\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "Converting...:   0%|          | 0/272 [00:00<?, "
                                                                    "?it/s]"}),
    ]
    nb.cells = [cell]
    cleaned = clean_outputs(nb, tmp_path / "checkout")
    texts = [text for _, text in _texts(cleaned)]
    assert texts == ["data from $BAB_DATA_DIR/ag_news\n", "model: site-packages/pkg/model\n"]


@pytest.mark.parametrize("ipynb", sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")), ids=lambda p: p.name)
def test_stored_outputs_carry_no_machine_path_and_no_progress_bar(ipynb):
    nb = nbformat.read(ipynb, as_version=4)
    found = [(i, text[:120]) for i, (cell, text) in enumerate(_texts(nb))
             if MACHINE_PATH.search(text) or BAR.search(text)]
    assert not found, f"{ipynb.name}: clean its outputs (python -m bab notebooks refresh does): {found[:3]}"


def test_a_refreshed_notebook_stores_the_kernelspec_jupyterlab_writes_and_no_orphan_widget_state():
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"display_name": "Python 3", "language": "python",
                                                           "name": "python3"},
                                            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}})
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    opened = opens_unmodified(nb)
    assert opened.metadata["kernelspec"] == INSTALLED_KERNEL and "widgets" not in opened.metadata
    view = nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "a"}})
    nb.cells[0].outputs = [view]
    nb.metadata["widgets"] = {"state": {}}
    assert "widgets" in opens_unmodified(nb).metadata  # a widget an output shows keeps its state


@pytest.mark.parametrize("ipynb", sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")), ids=lambda p: p.name)
def test_a_notebook_opens_unmodified_in_jupyterlab(ipynb):
    # JupyterLab replaces a kernelspec that differs from the kernel it starts, and that change marks the tab modified
    nb = nbformat.read(ipynb, as_version=4)
    assert nb.metadata.get("kernelspec") == INSTALLED_KERNEL, f"{ipynb.name}: python -m bab notebooks refresh"
    assert "widgets" not in nb.metadata
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5) and all("id" in cell for cell in nb.cells)
    # and it is stored as JupyterLab (nbformat) writes it, byte for byte
    assert nbformat.writes(nb) + "\n" == ipynb.read_text(encoding="utf-8")
