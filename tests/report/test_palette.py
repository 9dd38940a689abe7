"""The record's figures as palette PNGs: what a plot looked like is kept, in fewer bytes, and compacting twice is
compacting once."""

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from bab.report.lanes.palette import compact_figures, palette_png


def plot_like_png() -> bytes:
    """A figure as the notebooks draw them (matplotlib's Agg, as the inline backend): lines and a heatmap."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(6, 2.5), dpi=100)
    x = np.linspace(0, 1, 19)
    for k in range(3):
        left.plot(x, x ** (k + 1), marker="o", label=f"method {k}")
    left.legend()
    left.grid(alpha=0.3)
    right.imshow(np.random.default_rng(0).random((6, 12)), cmap="viridis")
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"), dtype=int)


def test_a_palette_png_is_smaller_looks_the_same_and_is_left_alone_the_second_time():
    original = plot_like_png()
    compact = palette_png(original)
    assert Image.open(io.BytesIO(compact)).mode == "P" and len(compact) < len(original)
    difference = np.abs(pixels(compact) - pixels(original))
    assert difference[..., 3].max() == 0  # opaque stays opaque
    assert difference.max() <= 8 and difference.mean() < 0.5  # shades of anti-aliased edges move a little
    assert palette_png(compact) == compact


def test_a_page_and_a_notebook_get_the_same_figures_and_keep_everything_else(tmp_path):
    original = base64.b64encode(plot_like_png()).decode()
    page = tmp_path / "p.html"
    page.write_text(f'<p>text</p><img src="data:image/png;base64,{original}"><p>more</p>', encoding="utf-8")
    notebook = tmp_path / "n.ipynb"
    cells = [{"cell_type": "code", "source": "plot()", "metadata": {}, "execution_count": 1, "outputs": [
        {"output_type": "display_data", "metadata": {},
         "data": {"image/png": original + "\n", "text/plain": "<Figure size 600x250>"}},
        {"output_type": "stream", "name": "stdout", "text": "done\n"}]}]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                                   sort_keys=True, indent=1))
    assert compact_figures(page) and compact_figures(notebook)
    text = page.read_text(encoding="utf-8")
    compacted = text.split("base64,")[1].split('"')[0]
    assert text.startswith("<p>text</p>") and text.endswith("<p>more</p>") and len(compacted) < len(original)
    stored = json.loads(notebook.read_text())["cells"][0]["outputs"]
    assert stored[0]["data"] == {"image/png": compacted + "\n", "text/plain": "<Figure size 600x250>"}
    assert stored[1] == cells[0]["outputs"][1]
    before = (page.read_bytes(), notebook.read_bytes())
    assert not compact_figures(page) and not compact_figures(notebook)
    assert (page.read_bytes(), notebook.read_bytes()) == before
    with pytest.raises(ValueError, match="an .html page or an .ipynb notebook"):
        compact_figures(tmp_path / "rows.json")


def test_a_figure_with_transparency_keeps_it():
    rgba = np.asarray(Image.open(io.BytesIO(plot_like_png())).convert("RGBA")).copy()
    rgba[:40, :, 3] = 0  # a transparent band across the top
    out = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(out, "PNG")
    compact = pixels(palette_png(out.getvalue()))
    assert compact[:40, :, 3].max() <= 8 and compact[40:, :, 3].min() >= 247
