"""The folder every ``python -m bab fit`` command writes into (``--out``), and its summary page.

``--out`` is checked before any work (a file, or a folder that holds something without ``--overwrite``, is refused).
The folder appears whole or not at all: everything is written into ``.<out>.staging-<random>/`` beside it and renamed
to ``out`` at the end, so a killed run leaves ``out`` as it was. metrics.json is strict JSON (a value that is not a
finite number is ``null``); summary.html is one self-contained page in one style for every method.
"""

from __future__ import annotations

import html
import shutil
import time
from pathlib import Path

from bab.core import strict_json
from bab.core.folders import non_empty, share, staging_beside, swap_into_place
from bab.core.step_clock import clock
from bab.core.threads import describe_threads

STYLE = ("body{font-family:sans-serif;max-width:62em;margin:2em auto;line-height:1.4}"
         "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}")


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse a file, or a non-empty folder unless ``overwrite``: a run never mixes its files with others'."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder to write the results into")
    entries = non_empty(out)
    if entries and not overwrite:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ValueError(f"--out {out} is not empty (it holds {shown}); pass --overwrite to replace it when the run "
                         f"ends, or choose another folder")


def write_whole(out: Path, write, staging: Path | None = None, main: bool = True) -> None:
    """``write(staging)`` into a fresh staging folder beside ``out`` (or ``staging``, made for every process), then
    swapped in as ``out`` by the ``main`` process: a failure or Ctrl-C leaves ``out`` as it was and removes the
    staging folder."""
    staging = staging_beside(out) if staging is None else staging
    try:
        write(staging)
        if main:
            swap_into_place(share(staging), out)
    except BaseException:
        if main:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def write_record(folder: Path, metrics: dict, start: float, headline: str, page, json_default=None) -> None:
    """The wall time and ``headline`` into ``metrics``, then metrics.json and summary.html (``page()``, called once
    ``metrics`` is complete) into ``folder``."""
    metrics["wall_seconds"] = time.perf_counter() - start
    metrics["headline"] = headline
    (folder / "metrics.json").write_text(strict_json.dumps(metrics, indent=1, default=json_default))
    (folder / "summary.html").write_text(page())


def announce(out: Path, metrics: dict) -> None:
    """The lines ``--quiet`` keeps: how the model did, and what was written where."""
    print(metrics["headline"])
    print(f"wrote {out}/: " + ", ".join(metrics["files"]) + f" ({clock(metrics['wall_seconds'])}, "
          f"{describe_threads()})")


def accuracy_cost_figure(points, xlabel: str, dense: float | None = None, note: str = "", note_at=None):
    """Accuracy against cost, as every fit draws it: ``points`` (method, cost, accuracy; ``accuracy_low`` /
    ``accuracy_high`` draw its interval, ``label`` names a point), one line of markers per method; ``dense`` a dashed
    line at the dense model's accuracy; ``note`` at the point ``note_at`` (x, y), or in the corner without one."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, at in points.groupby("method", sort=False):
        spread = [at.accuracy - at.accuracy_low, at.accuracy_high - at.accuracy] if "accuracy_low" in at else None
        ax.errorbar(at.cost, at.accuracy, yerr=spread, marker="o", label=method)
        for x, y, label in zip(at.cost, at.accuracy, at.get("label", [""] * len(at)), strict=True):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if dense is not None:
        ax.axhline(dense, color="grey", linestyle="--", label="dense attention")
    if note_at:
        ax.annotate(note, xy=note_at, xytext=(0.04, 0.08), textcoords="axes fraction", fontsize=8,
                    arrowprops=dict(arrowstyle="->", color="0.4"))
    elif note:
        ax.text(0.04, 0.08, note, transform=ax.transAxes, fontsize=8)
    ax.set(xlabel=xlabel, ylabel="accuracy (%)", title="Accuracy against cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plt.close(fig)
    return fig


def summary_page(title: str, heading: str, parts: list[str], style: str = "") -> str:
    """A self-contained page: ``title`` in the tab, ``heading`` on top, then ``parts`` (HTML, escaped by the caller)."""
    return "\n".join([f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
                      f"<style>{STYLE}{style}</style></head><body>", f"<h1>{html.escape(heading)}</h1>", *parts,
                      "</body></html>"])
