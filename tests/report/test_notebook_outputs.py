"""The notebooks' stored outputs read the same on any machine: no paths of the machine that stored them, no progress
bars frozen mid-way."""

import re
from pathlib import Path

import nbformat
import pytest

from bab.report.notebooks import clean_outputs

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.~$<])/(?:home|root|tmp|work|usr|opt|var)/|\.venv/")
BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")


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
