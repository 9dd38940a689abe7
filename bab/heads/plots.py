"""Figures: gate heatmaps, Pareto fronts, budget sweeps. Each function returns its Figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def gate_heatmaps(gates_by_budget: dict, max_cols: int = 5, title: str = "Soft gates g_lh(b)"):
    """One layer x head heatmap per budget, on a shared 0..1 colour scale."""
    budgets = list(gates_by_budget)
    cols = min(max_cols, len(budgets))
    rows = math.ceil(len(budgets) / cols)
    first = np.asarray(gates_by_budget[budgets[0]])
    L, H = first.shape
    fig, axes = plt.subplots(rows, cols, figsize=(0.35 * H * cols + 1.5, 0.45 * L * rows + 1.2), squeeze=False)
    for ax in axes.flat[len(budgets):]:
        ax.set_visible(False)
    for ax, b in zip(axes.flat, budgets, strict=False):
        g = np.asarray(gates_by_budget[b])
        sns.heatmap(g, vmin=0, vmax=1, cmap="viridis", cbar=False, ax=ax, square=True,
                    xticklabels=range(H), yticklabels=range(L))
        ax.set_title(f"b = {b:.2f}  cost {g.mean():.2f}", fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.colorbar(axes.flat[0].collections[0], ax=axes, shrink=0.8, label="gate")
    fig.suptitle(title)
    return fig


def pareto_plot(points: pd.DataFrame, sweep: pd.DataFrame | None = None, title: str = "Accuracy vs attention cost"):
    """``points``: one row per (method, budget) with columns method, cost, accuracy.

    ``sweep`` (optional): the budget sweep of one checkpoint, drawn as a line.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if sweep is not None and len(sweep):
        s = sweep.sort_values("cost")
        ax.plot(s.cost, s.accuracy, "-", color="0.6", lw=1.5, zorder=1, label="budgeted sweep (one checkpoint)")
    sns.scatterplot(data=points, x="cost", y="accuracy", hue="method", style="method", s=90, ax=ax, zorder=2)
    ax.set_xlabel("attention cost (fraction of dense heads)")
    ax.set_ylabel("accuracy (%)")
    ax.set_xlim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def budget_sweep_plot(sweep: pd.DataFrame, title: str = "One checkpoint, many budgets"):
    """Requested budget vs estimated cost (with the y = b line) and vs accuracy."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(sweep.budget, sweep.cost, "o-", label="estimated cost C(b)")
    ax1.plot([0, 1], [0, 1], "--", color="0.6", label="cost = budget")
    ax1.set_xlabel("requested budget b")
    ax1.set_ylabel("cost")
    ax1.legend(fontsize=8)
    ax2.plot(sweep.budget, sweep.accuracy, "o-", color="C1")
    ax2.set_xlabel("requested budget b")
    ax2.set_ylabel("accuracy (%)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
