"""The record's figures as 256-colour PNGs: a landed lane's page and executed notebook each carry its figures, and
the figures are most of their bytes. Reduced to a palette (the plots use far fewer colours; side by side the two
look alike) they take about a third, which keeps 21 lanes of pages within the record's size. Compacting twice
changes nothing: a palette image is left as it is, and so is one the palette would not make smaller."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from bab.core.folders import write_atomic

PAGE_PNG = re.compile(r"(data:image/png;base64,)([A-Za-z0-9+/=]+)")


def palette_png(data: bytes) -> bytes:
    """``data`` (a PNG) with its colours reduced to a palette of at most 256 (alpha kept), when that is smaller."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    if image.mode == "P":
        return data
    image = image.convert("RGBA")
    if image.getchannel("A").getextrema() == (255, 255):  # opaque, as the notebooks' figures are: colours only
        # (maximum coverage keeps every pixel within a few levels of its colour; white stays white)
        image = image.convert("RGB").quantize(256, method=Image.Quantize.MAXCOVERAGE)
    else:
        image = image.quantize(256, method=Image.Quantize.FASTOCTREE)  # the one method that keeps alpha
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return out.getvalue() if len(out.getvalue()) < len(data) else data


def _palette_base64(text: str) -> str:
    return base64.b64encode(palette_png(base64.b64decode(text))).decode("ascii")


def compact_figures(path: Path, kind: str | None = None) -> bool:
    """Rewrite the PNG figures of the page or notebook at ``path`` as ``palette_png`` makes them; ``kind`` ".html"
    or ".ipynb" (default: the file's suffix). Returns whether anything changed; the file is replaced whole."""
    path = Path(path)
    kind = kind or path.suffix
    if kind not in (".html", ".ipynb"):
        raise ValueError(f"compact_figures takes an .html page or an .ipynb notebook, not {path.name}")
    text = path.read_text(encoding="utf-8")
    if kind == ".html":
        compacted = PAGE_PNG.sub(lambda m: m.group(1) + _palette_base64(m.group(2)), text)
    else:
        notebook = json.loads(text)
        for cell in notebook.get("cells", []):
            for output in cell.get("outputs", []):
                data = output.get("data") or {}
                png = data.get("image/png")
                if isinstance(png, str):
                    data["image/png"] = _palette_base64(png.replace("\n", "")) + ("\n" if png.endswith("\n") else "")
        compacted = json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False)  # as nbformat writes one
    if compacted == text:
        return False
    write_atomic(path, compacted)
    return True
