"""The front page's one figure: every method of every notebook on a single cost axis, the papers' points beside.

Quality is what a method keeps of its own dense model: accuracy / dense accuracy, or dense perplexity /
perplexity for a language model. Cost is relative to dense too: measured time (1 / speed-up) where a speed-up
was measured, else the row's cost column (attention FLOPs, kept heads, kept context), and the marker's fill
says which (filled: timed; tinted: FLOPs or kept fraction). One marker shape per mechanism
(``bab.experiments.methods.MECHANISMS``); the papers' points are hollow. Built from result rows only, so a
report's ``results.json`` is enough to redraw it.
"""

from __future__ import annotations

import math

import pandas as pd

from bab.experiments.methods import MECHANISMS, registry
from bab.report import paper as paper_numbers

MARKERS = dict(zip(MECHANISMS, ("*", "o", "s", "^", "D", "P", "v"), strict=True))


def _quality(row: dict, dense: dict) -> float | None:
    if row.get("accuracy") is not None and dense.get("accuracy"):
        return row["accuracy"] / dense["accuracy"]
    if row.get("perplexity") and dense.get("perplexity") is not None:
        return dense["perplexity"] / row["perplexity"]
    return None


def cost_axis_points(rows, side: str = "ours") -> pd.DataFrame:
    """One point per row that has a quality and a cost: experiment, method, mechanism, quality, cost, and
    ``timed`` (cost from a measured speed-up) for ``side`` "ours"; the papers' rows for "paper" (their
    experiments mapped to ours, their speed-ups measured on their hardware)."""
    methods = registry()
    ours_of = {theirs: ours for ours, theirs in paper_numbers.COUNTERPARTS.items()}
    rows = [{**r, "experiment": ours_of.get(r["experiment"], r["experiment"])} for r in rows]
    dense = {r["experiment"]: r for r in rows if r["method"] == "dense"}
    points = []
    for row in rows:
        experiment, name = row["experiment"], row["method"]
        if name == "dense" or experiment not in dense or experiment not in methods or name not in methods[experiment]:
            continue
        quality = _quality(row, dense[experiment])
        speedup, cost = row.get("speedup"), row.get("cost")
        timed = speedup is not None and speedup > 0
        relative_cost = 1.0 / speedup if timed else cost
        if quality is None or relative_cost is None or not math.isfinite(relative_cost):
            continue
        points.append({"side": side, "experiment": experiment, "method": name,
                       "mechanism": methods[experiment][name].mechanism, "quality": quality,
                       "cost": relative_cost, "timed": timed})
    return pd.DataFrame(points, columns=["side", "experiment", "method", "mechanism", "quality", "cost", "timed"])


def cost_axis_figure(rows, path) -> pd.DataFrame:
    """Draw ours (filled when timed, half-filled when FLOP / budget based) and the papers' points (hollow)
    for the experiments in ``rows`` to ``path`` (PNG); return the points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    ours = cost_axis_points(rows)
    experiments = set(ours.experiment)
    ours_of = {theirs: o for o, theirs in paper_numbers.COUNTERPARTS.items()}
    theirs = cost_axis_points([r for r in paper_numbers.PAPER_RESULTS
                               if ours_of.get(r["experiment"], r["experiment"]) in experiments], side="paper")
    points = pd.concat([ours, theirs], ignore_index=True)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=90)
    colours = dict(zip(sorted(experiments), plt.get_cmap("tab10").colors, strict=False))
    for (side, mechanism, timed), group in points.groupby(["side", "mechanism", "timed"]):
        for experiment, sub in group.groupby("experiment"):
            colour = colours.get(experiment, "grey")
            face = "none" if side == "paper" else to_rgba(colour, 1.0 if timed else 0.3)
            ax.scatter(sub.cost, sub.quality, marker=MARKERS[mechanism], s=46 if side == "ours" else 40,
                       facecolors=face, edgecolors=colour, linewidths=1.4 if side == "ours" else 1.0,
                       linestyle="-" if side == "ours" else ":")
    ax.axhline(1.0, color="#999", lw=0.8, ls="--")
    ax.axvline(1.0, color="#999", lw=0.8, ls="--")
    ax.set_xlabel("cost relative to own dense (measured time where timed, else FLOPs / kept fraction)")
    ax.set_ylabel("quality kept (accuracy ratio, or dense / perplexity)")
    handles = [plt.Line2D([], [], ls="", marker=MARKERS[m], color="#444", label=m)
               for m in MECHANISMS if m in set(points.mechanism)]
    handles += [plt.Line2D([], [], ls="", marker="o", color=colours[e], label=e) for e in sorted(experiments)]
    handles += [plt.Line2D([], [], ls="", marker="o", mfc="#444", mec="#444", label="ours, timed"),
                plt.Line2D([], [], ls="", marker="o", mfc=to_rgba("#444", 0.3), mec="#444",
                           label="ours, FLOPs or kept fraction"),
                plt.Line2D([], [], ls="", marker="o", mfc="none", mec="#444", label="the paper's (hollow)")]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title("every method against its own dense model", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return points
