"""Figures of notebooks 06 and 07 (context pruning): the perplexity / sparsity Pareto curve (against the
static baselines), the dropped-token view and the token-kind breakdown. Each function returns its Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch


def perplexity_pareto(specialists: pd.DataFrame, dense_perplexity: float, budgeted: pd.DataFrame | None = None,
                      title: str = "Perplexity vs fraction of context pruned"):
    """``specialists``: one row per gamma (gamma, fraction_pruned, perplexity); ``budgeted``: one row per budget."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    s = specialists.sort_values("fraction_pruned")
    ax.plot(s.fraction_pruned, s.perplexity, "o-", label="per-gamma specialists")
    for _, row in s.iterrows():
        ax.annotate(f"γ={row.gamma:g}", (row.fraction_pruned, row.perplexity), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    if budgeted is not None and len(budgeted):
        b = budgeted.sort_values("fraction_pruned")
        ax.plot(b.fraction_pruned, b.perplexity, "s--", label="budget-conditioned (one checkpoint)")
        for _, row in b.iterrows():
            ax.annotate(f"b={row.budget:g}", (row.fraction_pruned, row.perplexity), textcoords="offset points",
                        xytext=(4, -10), fontsize=8, color="C1")
    ax.axhline(dense_perplexity, color="0.5", ls=":", label="dense")
    ax.set_xlabel("fraction of context pruned (hard decisions, validation)")
    ax.set_ylabel("validation perplexity")
    ax.set_xlim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def perplexity_vs_pruned(table: pd.DataFrame, title: str = "Perplexity vs fraction of context pruned"):
    """One panel per text: perplexity against fraction pruned, one line per method family.

    ``table``: rows with columns text, family (e.g. "dense", "learned (per gamma)", "local window",
    "strided"), fraction_pruned, perplexity.
    """
    texts = list(dict.fromkeys(table.text))
    fig, axes = plt.subplots(1, len(texts), figsize=(6 * len(texts), 4.2), squeeze=False)
    styles = {"learned (per gamma)": "o-", "local window": "s--", "strided": "^--"}
    for ax, text in zip(axes[0], texts, strict=True):
        rows = table[table.text == text]
        for family, group in rows.groupby("family", sort=False):
            if family == "dense":
                ax.axhline(group.perplexity.iloc[0], color="0.5", ls=":", label="dense")
                continue
            g = group.sort_values("fraction_pruned")
            ax.plot(g.fraction_pruned, g.perplexity, styles.get(family, "x-"), label=family)
        ax.set_xlabel("fraction of context pruned (hard decisions, held out)")
        ax.set_ylabel(f"perplexity on {text}")
        ax.set_yscale("log")
        ax.set_xlim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"{title}: {text}", fontsize=10)
    fig.tight_layout()
    return fig


def zero_shot_plot(table: pd.DataFrame, title: str = "Zero-shot accuracy vs fraction of context pruned"):
    """One panel per task: accuracy (%) against fraction pruned with 95% intervals, one line per weights kind, the
    dense model's interval shaded.

    ``table``: rows with columns task, weights ("pretrained" for dense), fraction_pruned, accuracy, ci_low,
    ci_high (accuracy and interval in %), chance (%, may be NaN).
    """
    tasks = list(dict.fromkeys(table.task))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        rows = table[table.task == task]
        dense = rows[rows.weights == "pretrained"].iloc[0]
        ax.axhspan(dense.ci_low, dense.ci_high, color="0.85", label="dense, 95% interval")
        ax.axhline(dense.accuracy, color="0.4", ls=":")
        for weights, group in rows[rows.weights != "pretrained"].groupby("weights", sort=False):
            g = group.sort_values("fraction_pruned")
            ax.errorbar(g.fraction_pruned, g.accuracy, yerr=[g.accuracy - g.ci_low, g.ci_high - g.accuracy],
                        fmt="o-", capsize=3, label=weights if weights.startswith("dense") else f"{weights} weights")
        if pd.notna(dense.get("chance", float("nan"))):
            ax.axhline(dense.chance, color="tab:red", ls="--", lw=0.8, label="chance")
        ax.set_xlabel("fraction of context pruned (held-out Austen)")
        ax.set_ylabel("accuracy (%)")
        ax.set_xlim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"{task} (n = {int(dense.n)})", fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def dropped_token_view(tokens: list[str], drop_times: torch.Tensor, title: str = "When each token is dropped",
                       layers: list[int] | None = None):
    """``drop_times`` [L, T]: the query position whose arrival dropped token j in each layer (-1: kept to the end).
    ``layers``: the layer index of each row (default 0..L-1), when only some layers are shown.

    One row per layer, one column per token of the passage; the colour is how many later tokens
    saw it before it was dropped (its lifetime); white cells are tokens still kept at the end.
    """
    times = np.asarray(drop_times, dtype=float)
    L, T = times.shape
    lifetime = np.where(times >= 0, times - np.arange(T)[None, :], np.nan)
    fig, ax = plt.subplots(figsize=(max(8, 0.22 * T), 0.5 * L + 1.8))
    cmap = plt.get_cmap("magma_r").with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(lifetime), aspect="auto", cmap=cmap, interpolation="nearest")
    ax.set_xticks(range(T))
    ax.set_xticklabels([t.replace("\n", "⏎") for t in tokens], rotation=90, fontsize=7)
    ax.set_yticks(range(L))
    ax.set_yticklabels([f"layer {i}" for i in (layers if layers is not None else range(L))], fontsize=8)
    fig.colorbar(image, ax=ax, label="tokens seen before drop", shrink=0.8)
    ax.set_title(title + " (white: kept to the end of the passage)", fontsize=10)
    fig.tight_layout()
    return fig


def dropped_token_table(tokens: list[str], drop_times: torch.Tensor) -> pd.DataFrame:
    """The same view as text: one row per token, one column per layer ('kept' or 'dropped at t')."""
    times = np.asarray(drop_times)
    return pd.DataFrame({f"layer {layer}": ["kept" if t < 0 else f"dropped at {t}" for t in times[layer]]
                         for layer in range(times.shape[0])}, index=pd.Index(tokens, name="token"))


def token_kind_plot(breakdown: pd.DataFrame, title: str = "Which tokens are dropped"):
    """Bar per token kind: the fraction of its (later query, layer) pairs pruned, and its share of tokens."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(breakdown))
    ax.bar(x - 0.2, breakdown["fraction pruned"], width=0.4, label="fraction of its pairs pruned")
    ax.bar(x + 0.2, breakdown["token share"], width=0.4, label="share of tokens")
    overall = breakdown.attrs.get("overall fraction pruned")
    if overall is not None:
        ax.axhline(overall, color="0.4", ls=":", label="all tokens")
    ax.set_xticks(x)
    ax.set_xticklabels(breakdown.index)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig
