"""The budget explorer: a widget in JupyterLab, a static figure when headless; never an error."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from bab.heads.encoder import EncoderClassifier, EncoderConfig  # noqa: E402
from bab.heads.interactive import budget_explorer, budget_view, want_widgets  # noqa: E402


@pytest.fixture
def model_and_data():
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=20, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                            num_layers=2, d_ff=32, gates="budget")).eval()
    ids = torch.randint(1, 20, (16, 8))
    return model, TensorDataset(ids, (ids[:, 1] > 10).long())


def test_headless_environment_turns_widgets_off(monkeypatch):
    monkeypatch.setenv("BAB_HEADLESS", "1")
    assert want_widgets() is False
    assert want_widgets(True) is True  # an explicit choice wins
    monkeypatch.delenv("BAB_HEADLESS")
    assert want_widgets() is True  # ipywidgets is installed in the tested set


def test_static_fallback_draws_one_panel_per_budget(model_and_data):
    model, data = model_and_data
    plt.close("all")
    budget_explorer(model, data, interactive=False, static_budgets=(0.25, 0.5, 1.0))
    fig = plt.gcf()
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 3 and titles[0].startswith("b=0.25")


def test_widget_path_builds_a_slider_that_redraws(model_and_data, monkeypatch):
    import ipywidgets

    model, data = model_and_data
    shown = []
    monkeypatch.setattr("bab.heads.interactive.display", shown.append)
    budget_explorer(model, data, interactive=True)
    box = shown[0]
    slider = box.children[0].children[0]
    assert isinstance(slider, ipywidgets.FloatSlider)
    slider.value = 0.25  # triggers a redraw; must not raise


def test_budget_view_reports_hard_cost_exactly(model_and_data):
    model, data = model_and_data
    stats = budget_view(model, data, 0.5, mode="hard")
    assert stats["cost"] == 0.5
    plt.close("all")
