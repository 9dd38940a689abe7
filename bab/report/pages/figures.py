"""The front page's one figure: every method of every notebook on a single cost axis, the papers' points beside.

Quality is what a model keeps of its own dense model: accuracy / dense accuracy, or dense perplexity / perplexity
for a language model. The dense model is the experiment's dense row, except where the experiment declares a dense
fine-tune of the same protocol (``dense_finetuned``, the pretrained decoder's) and has that row: a fine-tune also
adapts to the training text, which against the untouched pretrained model would read as a gain from pruning.
Cost is relative to dense too: measured time (1 / speed-up) where a speed-up was measured, else the row's cost
column (attention FLOPs, kept heads, kept context), and the marker's fill says which (filled: timed; tinted: FLOPs
or kept fraction). One panel per paper, each with its own quality scale; one marker shape per mechanism
(``bab.experiments.methods.MECHANISMS``); the papers' points hollow with a thick edge. A point outside its panel's
scale (a perplexity of thousands keeps almost nothing) is drawn at the edge as a triangle, its value beside it.
Built from result rows only, so a report's ``results.json`` is enough to redraw it.
"""

from __future__ import annotations

import importlib
import math

import pandas as pd

from bab.experiments.methods import MECHANISMS, registry
from bab.experiments.registry import NOTEBOOKS, PAPERS
from bab.report.results import paper as paper_numbers

# the mechanisms' markers; triangles are kept for the points off a panel's scale
MARKERS = dict(zip(MECHANISMS, ("*", "o", "s", "p", "D", "P", "h"), strict=True))
OFF_SCALE_MARKERS = {"below": "v", "above": "^", "right": ">"}

# One panel per paper, in this order; each notebook's experiments go to its paper's (bab.experiments.registry)
PANELS = PAPERS
PAPER_OF_MODULE = {notebook.module: notebook.paper for notebook in NOTEBOOKS}
OTHER_PANEL = "other experiments"

# A panel's quality scale: from its lowest point (less a margin) but never below QUALITY_FLOOR, a model that keeps
# under a quarter of its dense model's quality being off the scale; up to its highest, at most QUALITY_CEILING.
# Cost: from 0 to the largest cost, at most COST_CEILING (twice the dense model's time).
QUALITY_FLOOR = 0.25
QUALITY_CEILING = 1.5
COST_CEILING = 2.0
MARGIN = 0.06  # of the panel's span, around the points

COLUMNS = ["side", "paper", "experiment", "method", "mechanism", "quality", "cost", "timed", "reference"]


def paper_of(experiment: str) -> str:
    """The paper (panel) an experiment belongs to, by the notebook package that declares it."""
    for module, paper in PAPER_OF_MODULE.items():
        if any(s.experiment == experiment for s in importlib.import_module(module).METHOD_SETS):
            return paper
    return OTHER_PANEL


def reference_methods(experiment: str) -> tuple[str, ...]:
    """The dense rows an experiment's models are measured against, the first one present taken: the dense
    fine-tune of the same protocol where the experiment declares one, then the dense model."""
    method_set = registry().get(experiment)
    try:
        finetuned = (method_set.dense_finetuned.name,) if method_set is not None else ()
    except AttributeError:
        finetuned = ()
    return (*finetuned, "dense")


def _quality(row: dict, dense: dict) -> float | None:
    if row.get("accuracy") is not None and dense.get("accuracy"):
        return row["accuracy"] / dense["accuracy"]
    if row.get("perplexity") and dense.get("perplexity") is not None:
        return dense["perplexity"] / row["perplexity"]
    return None


def cost_axis_points(rows, side: str = "ours") -> pd.DataFrame:
    """One point per row that has a quality and a cost: paper (panel), experiment, method, mechanism, quality,
    cost, ``timed`` (cost from a measured speed-up) and the reference (the dense row's method) for ``side``
    "ours"; the papers' rows for "paper" (their experiments mapped to ours, their speed-ups measured on their
    hardware). Dense references themselves (mechanism "none") are not points."""
    methods = registry()
    ours_of = {theirs: ours for ours, theirs in paper_numbers.COUNTERPARTS.items()}
    rows = [{**r, "experiment": ours_of.get(r["experiment"], r["experiment"])} for r in rows]
    by_method = {(r["experiment"], r["method"]): r for r in rows if r.get("budget") == 1.0 or r["method"] == "dense"}
    references = {}
    for experiment in {r["experiment"] for r in rows}:
        found = next((m for m in reference_methods(experiment) if (experiment, m) in by_method), None)
        if found is not None:
            references[experiment] = (found, by_method[(experiment, found)])
    points = []
    for row in rows:
        experiment, name = row["experiment"], row["method"]
        if experiment not in references or experiment not in methods or name not in methods[experiment]:
            continue
        mechanism = methods[experiment][name].mechanism
        if mechanism == "none":
            continue
        reference, dense = references[experiment]
        quality = _quality(row, dense)
        speedup, cost = row.get("speedup"), row.get("cost")
        timed = speedup is not None and speedup > 0
        relative_cost = 1.0 / speedup if timed else cost
        if quality is None or relative_cost is None or not math.isfinite(relative_cost):
            continue
        points.append({"side": side, "paper": paper_of(experiment), "experiment": experiment, "method": name,
                       "mechanism": mechanism, "quality": quality, "cost": relative_cost, "timed": timed,
                       "reference": reference})
    return pd.DataFrame(points, columns=COLUMNS)


def panel_scale(points: pd.DataFrame) -> dict:
    """A panel's axis limits from its points: quality from the lowest (never below ``QUALITY_FLOOR``) to the
    highest (at least 1, the dense model; at most ``QUALITY_CEILING``), each with a margin; cost from 0 to the
    largest (at least 1, at most ``COST_CEILING``)."""
    quality = points.quality[points.quality >= QUALITY_FLOOR]
    low = min(quality.min() if len(quality) else QUALITY_FLOOR, 1.0)
    high = min(max(quality.max() if len(quality) else 1.0, 1.0), QUALITY_CEILING)
    margin = MARGIN * max(high - low, 0.05)
    right = min(max(points.cost.max() if len(points) else 1.0, 1.0), COST_CEILING)
    return {"low": max(low - margin, QUALITY_FLOOR), "high": high + margin, "right": right * (1 + MARGIN)}


def clip_to_scale(points: pd.DataFrame, scale: dict) -> pd.DataFrame:
    """``points`` with where each is drawn: ``shown_quality`` and ``shown_cost`` inside ``scale`` (a point off it
    at the edge it left by), and ``off``: "below", "above", "right" or "" (on the scale)."""
    points = points.copy()
    off = pd.Series("", index=points.index, dtype=object)
    off[points.cost > scale["right"]] = "right"
    off[points.quality > scale["high"]] = "above"
    off[points.quality < scale["low"]] = "below"
    points["off"] = off
    points["shown_quality"] = points.quality.clip(scale["low"], scale["high"])
    points["shown_cost"] = points.cost.clip(upper=scale["right"])
    return points


def _value_text(quality: float) -> str:
    return f"{quality:.2g}" if quality < 0.1 else f"{quality:.2f}"


def cost_axis_figure(rows, path, width_px: int = 1400, dpi: int = 100) -> pd.DataFrame:
    """Draw ours (filled when timed, tinted when FLOP / budget based) and the papers' points (hollow, thick) for
    the experiments in ``rows`` to ``path`` (PNG, ``width_px`` wide: the front page shows it at about 1,150 px, so
    its 11-point text reads at about 12 px); one panel per paper. Return the points drawn, with where each was
    drawn (``clip_to_scale``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = cost_axis_points(rows)
    experiments = set(ours.experiment)
    ours_of = {theirs: o for o, theirs in paper_numbers.COUNTERPARTS.items()}
    theirs = cost_axis_points([r for r in paper_numbers.PAPER_RESULTS
                               if ours_of.get(r["experiment"], r["experiment"]) in experiments], side="paper")
    points = pd.concat([ours, theirs], ignore_index=True) if len(theirs) else ours
    panels = [p for p in (*PANELS, OTHER_PANEL) if p in set(points.paper)] or [PANELS[0]]
    style = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 11,
             "xtick.labelsize": 11, "ytick.labelsize": 11}
    with plt.rc_context(style):
        return _draw(points, panels, path, width_px, dpi)


def _off_scale_note(group: pd.DataFrame, edge: str, scale: dict) -> str:
    where = {"below": f"below {scale['low']:.2f}", "above": f"above {scale['high']:.2f}",
             "right": f"costing over {scale['right']:.1f}"}[edge]
    values = sorted(group.quality if edge != "right" else group.cost)
    shown = ", ".join(_value_text(v) for v in values[:4]) + (" …" if len(values) > 4 else "")
    return f"off scale: {len(group)} {where}\n({shown})"


def _draw(points: pd.DataFrame, panels: list[str], path, width_px: int, dpi: int) -> pd.DataFrame:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    height_px = 560
    fig, axes = plt.subplots(1, len(panels), figsize=(width_px / dpi, height_px / dpi), dpi=dpi, squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.985, top=0.89, bottom=0.32, wspace=0.22)
    drawn = []
    for ax, panel in zip(axes[0], panels, strict=True):
        here = points[points.paper == panel]
        scale = panel_scale(here)
        here = clip_to_scale(here, scale)
        drawn.append(here)
        colours = dict(zip(sorted(set(here.experiment)), plt.get_cmap("tab10").colors, strict=False))
        for (side, mechanism, timed, off), group in here.groupby(["side", "mechanism", "timed", "off"]):
            for experiment, sub in group.groupby("experiment"):
                colour = colours.get(experiment, "grey")
                face = "none" if side == "paper" else to_rgba(colour, 1.0 if timed else 0.3)
                ax.scatter(sub.shown_cost, sub.shown_quality, marker=OFF_SCALE_MARKERS.get(off, MARKERS[mechanism]),
                           s=120 if side == "paper" else 55, facecolors=face, edgecolors=colour,
                           linewidths=2.2 if side == "paper" else 1.2, zorder=4 if side == "paper" else 3,
                           clip_on=False)
        notes = [plt.Line2D([], [], ls="", marker=OFF_SCALE_MARKERS[edge], ms=8, color="#666",
                            label=_off_scale_note(group, edge, scale))
                 for edge, group in here[here.off != ""].groupby("off")]
        if notes:  # a legend, so that matplotlib places it where it hides no point
            ax.add_artist(ax.legend(handles=notes, loc="best", framealpha=0.92, handletextpad=0.3, borderpad=0.4))
        ax.axhline(1.0, color="#999", lw=0.8, ls="--", zorder=1)
        ax.axvline(1.0, color="#999", lw=0.8, ls="--", zorder=1)
        ax.set_xlim(0, scale["right"])
        ax.set_ylim(scale["low"], scale["high"])
        ax.set_title(panel, fontweight="bold")
        ax.set_xlabel("cost relative to own dense")
        ax.grid(alpha=0.25)
        handles = [plt.Line2D([], [], ls="", marker="o", ms=8, color=colours[e], label=e) for e in sorted(colours)]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False,
                  ncol=2 if len(handles) > 2 else len(handles), columnspacing=1.2, handletextpad=0.3)
    axes[0][0].set_ylabel("quality kept: accuracy ratio,\nor dense perplexity / perplexity")
    present = set(points.mechanism)
    grey = "#444"
    handles = [plt.Line2D([], [], ls="", marker=MARKERS[m], ms=9, color=grey, label=m)
               for m in MECHANISMS if m in present]
    handles += [plt.Line2D([], [], ls="", marker="o", ms=9, mfc=grey, mec=grey, label="ours, timed"),
                plt.Line2D([], [], ls="", marker="o", ms=9, mfc=to_rgba(grey, 0.3), mec=grey,
                           label="ours, FLOPs or kept fraction"),
                plt.Line2D([], [], ls="", marker="o", ms=11, mfc="none", mec=grey, mew=2.2, label="the paper's"),
                plt.Line2D([], [], ls="", marker="v", ms=9, color="#888", label="off scale, at the edge")]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False,
               bbox_to_anchor=(0.5, 0.0), columnspacing=1.4, handletextpad=0.3)
    fig.suptitle("every method against its own dense model (cost: measured time where timed, else FLOPs or kept "
                 "fraction)", fontsize=12)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return pd.concat(drawn, ignore_index=True)
