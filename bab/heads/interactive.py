"""The budget knob in JupyterLab: a slider that re-evaluates one loaded checkpoint.

Under papermill / nbconvert (``BAB_HEADLESS=1``, or ``interactive=False``) or without
ipywidgets, it draws the same view as a static figure at a few budgets instead.
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import seaborn as sns
from IPython.display import display

from bab.heads.evaluate import evaluate


def want_widgets(interactive: bool | None = None) -> bool:
    if interactive is not None:
        return interactive
    if os.environ.get("BAB_HEADLESS"):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def budget_view(model, data, budget: float, mode: str = "soft", ax_gates=None):
    """Gates at ``budget`` as a heatmap, with cost and accuracy in the title."""
    stats = evaluate(model, data, budget=budget, mode=mode)
    gates = model.gates(budget).detach().numpy()
    if mode != "soft":
        gates = model.head_mask_for(budget).numpy()
    if ax_gates is None:
        _, ax_gates = plt.subplots(figsize=(0.5 * gates.shape[1] + 2, 0.5 * gates.shape[0] + 1.5))
    sns.heatmap(gates, vmin=0, vmax=1, cmap="viridis", ax=ax_gates, square=True, cbar=False)
    ax_gates.set_xlabel("head")
    ax_gates.set_ylabel("layer")
    title = f"b={budget:.2f} ({mode}): cost {stats['cost']:.3f}, accuracy {stats['accuracy']:.1f}%"
    ax_gates.set_title(title, fontsize=9)
    return stats


def budget_explorer(model, data, interactive: bool | None = None, static_budgets=(0.1, 0.25, 0.5, 1.0)):
    """A slider over b (and soft/hard mode) in JupyterLab; a static row of panels otherwise."""
    if want_widgets(interactive):
        import ipywidgets as widgets

        output = widgets.Output()
        slider = widgets.FloatSlider(value=0.5, min=0.05, max=1.0, step=0.05, description="budget b",
                                     continuous_update=False, readout_format=".2f")
        mode = widgets.ToggleButtons(options=["soft", "hard"], value="soft", description="gates")

        def redraw(*_):
            with output:
                output.clear_output(wait=True)
                fig, ax = plt.subplots(figsize=(6, 3))
                budget_view(model, data, slider.value, mode.value, ax_gates=ax)
                plt.show()

        slider.observe(redraw, names="value")
        mode.observe(redraw, names="value")
        redraw()
        display(widgets.VBox([widgets.HBox([slider, mode]), output]))
        return
    fig, axes = plt.subplots(1, len(static_budgets), figsize=(3.2 * len(static_budgets), 3))
    for ax, b in zip(axes, static_budgets, strict=True):
        budget_view(model, data, b, "soft", ax_gates=ax)
    fig.suptitle("Budget explorer (static: open the notebook in JupyterLab for the slider)")
    fig.tight_layout()
    plt.show()
