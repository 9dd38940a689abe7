"""Figures of notebook 05 (Sparsifiner on a ViT). Each function returns its Figure.

- ``connectivity_figure``: a query patch on its image, its connectivity mask, and sparse vs full
  attention heatmaps for several layers and heads (the paper's Fig. 3);
- ``basis_figure``: rows of the sparse up-projection W~_up drawn on the patch grid (Fig. 6);
- ``coefficients_figure``: the sparse low-rank coefficients A~_down (Fig. 7);
- ``accuracy_cost_plot`` / ``keep_rate_plot``: every method on one MHSA-cost axis, and the sweep;
- ``retention_plot``: several models' sweeps against their own dense models (50 vs 197 tokens).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def _grid(values: np.ndarray) -> np.ndarray:
    """Per-token values [n] (token 0 = CLS) -> the patch grid [g, g] (CLS dropped)."""
    patches = np.asarray(values)[1:]
    side = int(round(len(patches) ** 0.5))
    return patches.reshape(side, side)


def connectivity_figure(image: np.ndarray, query: int, layers: list[int], heads: list[int], masks: dict,
                        sparse: dict, full: dict, title: str = ""):
    """``masks``, ``sparse``, ``full``: {(layer, head): [n] row of the query} (connectivity, sparse and dense
    attention). Rows: layers; columns: the image with the query patch, then per head mask | sparse | full."""
    side = int(round((len(next(iter(masks.values()))) - 1) ** 0.5))
    patch = image.shape[0] // side
    cols = 1 + 3 * len(heads)
    fig, axes = plt.subplots(len(layers), cols, figsize=(1.3 * cols, 1.45 * len(layers) + 0.6), squeeze=False)
    r, c = divmod(query - 1, side)
    for row, layer in enumerate(layers):
        ax = axes[row, 0]
        ax.imshow(image, cmap="gray")
        ax.add_patch(plt.Rectangle((c * patch - 0.5, r * patch - 0.5), patch, patch, fill=False, color="yellow", lw=2))
        ax.set_ylabel(f"layer {layer}", fontsize=8)
        for j, head in enumerate(heads):
            for offset, (maps, cmap, name) in enumerate(((masks, "gray", "mask"), (sparse, "viridis", "sparse"),
                                                        (full, "viridis", "full"))):
                ax = axes[row, 1 + 3 * j + offset]
                ax.imshow(_grid(maps[(layer, head)]), cmap=cmap)
                if row == 0:
                    ax.set_title(f"h{head} {name}", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title or f"query patch {query}: connectivity mask, sparse and full attention", fontsize=9)
    fig.tight_layout()
    return fig


def basis_figure(basis: dict, num_rows: int = 8, title: str = "Sparse up-projection basis W~_up"):
    """``basis``: {layer: [n_down, n] array of one head}; each basis row drawn on the patch grid."""
    layers = list(basis)
    rows = min(num_rows, next(iter(basis.values())).shape[0])
    fig, axes = plt.subplots(len(layers), rows, figsize=(1.1 * rows, 1.15 * len(layers) + 0.5), squeeze=False)
    for i, layer in enumerate(layers):
        w = np.asarray(basis[layer])
        for m in range(rows):
            ax = axes[i, m]
            ax.imshow(_grid(w[m]), cmap="viridis")
            ax.set_xticks([])
            ax.set_yticks([])
            if m == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
            if i == 0:
                ax.set_title(f"row {m}", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def coefficients_figure(coefficients: dict, title: str = "Sparse low-rank coefficients A~_down (zeros: below tau)"):
    """``coefficients``: {label: [n, n_down] array}; one heatmap each (queries x basis rows)."""
    labels = list(coefficients)
    fig, axes = plt.subplots(1, len(labels), figsize=(2.4 * len(labels), 3.2), squeeze=False)
    for ax, label in zip(axes.flat, labels, strict=True):
        a = np.asarray(coefficients[label])
        sns.heatmap(a, cmap="viridis", vmin=0, vmax=1, cbar=False, ax=ax, xticklabels=False, yticklabels=False)
        ax.set_title(f"{label}\n{100 * (a == 0).mean():.0f}% zero", fontsize=8)
        ax.set_xlabel("basis row")
        ax.set_ylabel("query")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def accuracy_cost_plot(points: pd.DataFrame, title: str = "Accuracy vs MHSA cost"):
    """``points``: columns method, cost (MHSA multiply-adds / dense), accuracy; lines join each method's points."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for method, group in points.groupby("method", sort=False):
        g = group.sort_values("cost")
        ax.plot(g.cost, g.accuracy, "o-" if len(g) > 1 else "o", label=method, ms=6)
    ax.set_xlabel("MHSA cost (attention multiply-adds / dense)")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def keep_rate_plot(sweep: pd.DataFrame, dense_accuracy: float, title: str = "One checkpoint, many keep rates"):
    """Accuracy and analytic MHSA cost against the keep rate (Table 2 at our scale)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(sweep.keep_rate, sweep.accuracy, "o-", label="Sparsifiner")
    ax1.axhline(dense_accuracy, ls="--", color="0.5", label="dense")
    ax1.set_xlabel("keep rate")
    ax1.set_ylabel("test accuracy (%)")
    ax1.legend(fontsize=8)
    ax2.plot(sweep.keep_rate, sweep.cost, "o-", color="C1", label="with predictor")
    ax2.plot([0, 1], [0, 1], ":", color="0.5", label="attention alone (= keep rate)")
    ax2.axhline(1.0, ls="--", color="0.5")
    ax2.set_xlabel("keep rate")
    ax2.set_ylabel("MHSA cost / dense")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def retention_plot(tables: dict[str, pd.DataFrame], title: str = "Accuracy against own dense model"):
    """Accuracy in points against each model's own dense model (``ViTStudy.retention``'s "vs dense") against the
    keep rate, one line per ``{label: table}``, and the MHSA cost of each beside it."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for label, table in tables.items():
        sparse = table[table.keep_rate.notna()].sort_values("keep_rate")
        ax1.plot(sparse.keep_rate, sparse["vs dense"], "o-", label=label)
        ax2.plot(sparse.keep_rate, sparse.cost, "o-", label=label)
    ax1.axhline(0.0, ls="--", color="0.5", label="own dense")
    ax1.set_ylabel("accuracy − own dense (points)")
    ax2.set_ylabel("MHSA cost / dense")
    for ax in (ax1, ax2):
        ax.set_xlabel("keep rate")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def show(fig, dpi: int = 80) -> None:
    """Display ``fig`` as a PNG in the notebook whatever the matplotlib backend, then close it.

    The report runs kernels with MPLBACKEND=Agg, under which ``plt.show()`` displays nothing and a bare
    Figure has no PNG formatter; an explicit PNG keeps the figures in the stored notebook and the HTML.
    """
    import io

    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    display(Image(buffer.getvalue()))
