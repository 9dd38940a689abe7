"""The front page's cost-axis figure: each model against its own dense model, one panel per paper, points off a
panel's scale drawn at its edge and marked, text that reads on the page."""

import matplotlib
import pandas as pd
import pytest

from bab.experiments.context_pruning import GPT2_METHODS as GPT2
from bab.experiments.pretrained_context import PRETRAINED_METHODS as DECODER
from bab.experiments.synthetic import SYNTHETIC_METHODS as SYN
from bab.experiments.vit import VIT_METHODS as VIT
from bab.report.pages import figures
from bab.report.pages.figures import clip_to_scale, cost_axis_figure, cost_axis_points, panel_scale


def row(method, budget, **values):
    return {"experiment": method.experiment, "method": method.name, "budget": budget, "cost": None,
            "accuracy": None, "speedup": None, "perplexity": None, **values}


def decoder_rows(with_finetune=True):
    rows = [row(DECODER.dense, 1.0, perplexity=60.0, cost=1.0),
            row(DECODER.specialist, None, perplexity=30.0, cost=0.14, settings={"gamma": 1.0}),
            row(DECODER.budgeted, 0.1, perplexity=43016.0, cost=0.11),
            row(DECODER.static, None, perplexity=400.0, cost=0.14, settings={"kind": "local", "gamma": 1.0})]
    if with_finetune:
        rows.insert(1, row(DECODER.dense_finetuned, 1.0, perplexity=25.0, cost=1.0))
    return rows


def test_the_decoders_pruned_models_are_measured_against_the_dense_fine_tune_where_it_was_run():
    points = cost_axis_points(decoder_rows()).set_index("method")
    assert points.loc[DECODER.specialist.name, "quality"] == pytest.approx(25.0 / 30.0)
    assert points.loc[DECODER.budgeted.name, "quality"] == pytest.approx(25.0 / 43016.0)
    assert points.loc[DECODER.static.name, "quality"] == pytest.approx(25.0 / 400.0)
    assert set(points.reference) == {DECODER.dense_finetuned.name}
    # the dense models are references, not points
    assert DECODER.dense.name not in points.index and DECODER.dense_finetuned.name not in points.index
    # without the fine-tune's row: the untouched pretrained model, which flatters pruning (60 / 30 = 2)
    without = cost_axis_points(decoder_rows(with_finetune=False)).set_index("method")
    assert without.loc[DECODER.specialist.name, "quality"] == pytest.approx(60.0 / 30.0)
    assert set(without.reference) == {"dense"}


def test_an_experiment_without_a_fine_tune_keeps_its_dense_row_and_each_paper_has_its_panel():
    rows = [row(GPT2.dense, 1.0, perplexity=20.0, cost=1.0, speedup=1.0),
            row(GPT2.specialist, None, perplexity=25.0, cost=0.3, speedup=1.6, settings={"gamma": 0.1}),
            row(SYN.dense, 1.0, accuracy=100.0, cost=1.0), row(SYN.warm, 0.5, accuracy=95.0, cost=0.1),
            row(VIT.dense, 1.0, accuracy=90.0, cost=1.0), row(VIT.sparsifiner, 0.5, accuracy=81.0, cost=0.67)]
    points = cost_axis_points(rows).set_index("experiment")
    assert points.loc["gpt2_context_pruning", ["quality", "cost", "timed", "reference"]].tolist() == [
        pytest.approx(0.8), pytest.approx(1 / 1.6), True, "dense"]
    assert points.loc["synthetic", "quality"] == pytest.approx(0.95)
    assert points.loc["vit_sparsifiner", "quality"] == pytest.approx(0.9)
    assert points.paper.to_dict() == {"gpt2_context_pruning": "dynamic context pruning",
                                      "synthetic": "budgeted attention", "vit_sparsifiner": "sparsifiner"}


def test_points_off_a_panels_scale_are_clipped_to_its_edge_and_marked():
    points = pd.DataFrame({"quality": [0.9, 0.95, 1.0, 0.0006, 3.0, 0.97], "cost": [0.5, 0.3, 1.0, 0.1, 0.5, 5.0]})
    scale = panel_scale(points)
    # independently: the points at or above the floor span 0.9 .. 3.0, the top capped at 1.5
    span = 1.5 - 0.9
    assert scale["low"] == pytest.approx(0.9 - figures.MARGIN * span)
    assert scale["high"] == pytest.approx(1.5 + figures.MARGIN * span)
    assert scale["right"] == pytest.approx(figures.COST_CEILING * (1 + figures.MARGIN))
    clipped = clip_to_scale(points, scale)
    assert clipped.off.tolist() == ["", "", "", "below", "above", "right"]
    assert clipped.shown_quality.tolist()[:3] == [0.9, 0.95, 1.0]
    assert clipped.shown_quality[3] == scale["low"] and clipped.shown_quality[4] == scale["high"]
    assert clipped.shown_cost[5] == scale["right"] and clipped.shown_cost[0] == 0.5
    # a panel whose lowest point is above the floor starts just below that point, not at the floor
    assert panel_scale(points.iloc[:3]).get("low") == pytest.approx(0.9 - figures.MARGIN * 0.1)


def capture_figure(monkeypatch):
    """The matplotlib figure cost_axis_figure draws, kept from being closed."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    return kept


def test_the_figure_draws_the_off_scale_perplexity_at_the_edge_with_its_value(tmp_path, monkeypatch):
    kept = capture_figure(monkeypatch)
    drawn = cost_axis_figure(decoder_rows(), tmp_path / "axis.png")
    decoder = drawn[drawn.side == "ours"].set_index("method")
    low = decoder.shown_quality.min()
    assert decoder.loc[DECODER.budgeted.name, "off"] == "below"
    assert decoder.loc[DECODER.budgeted.name, "shown_quality"] == low >= figures.QUALITY_FLOOR
    assert decoder.loc[DECODER.specialist.name, "off"] == ""
    assert decoder.loc[DECODER.specialist.name, "shown_quality"] == pytest.approx(25.0 / 30.0)
    fig = kept[-1]
    texts = [t.get_text() for ax in fig.axes for legend in [ax.get_legend(), *ax.artists]
             if isinstance(legend, matplotlib.legend.Legend) for t in legend.get_texts()]
    assert any("off scale: 2 below" in t and "0.00058" in t and "0.06" in t for t in texts), texts
    # drawn as a down-pointing triangle at the edge, where a mechanism's marker would be a square
    assert DECODER.budgeted.mechanism == "context tokens" and figures.MARKERS["context tokens"] != "v"
    assert figures.OFF_SCALE_MARKERS["below"] == "v" and "v" not in figures.MARKERS.values()


def test_the_figures_text_reads_at_11_pixels_or_more_on_the_front_page(tmp_path, monkeypatch):
    from PIL import Image

    kept = capture_figure(monkeypatch)
    rows = [*decoder_rows(), row(SYN.dense, 1.0, accuracy=100.0, cost=1.0), row(SYN.warm, 0.5, accuracy=95.0,
                                                                               cost=0.1)]
    cost_axis_figure(rows, tmp_path / "axis.png")
    fig = kept[-1]
    width_px = Image.open(tmp_path / "axis.png").size[0]
    shown_px = 1150  # the front page's content width at a 1280-pixel window, less its margins
    scale = shown_px / width_px
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
    assert len(texts) > 20  # ticks, labels, legends, titles
    smallest = min(t.get_fontsize() * fig.dpi / 72 * scale for t in texts)
    assert smallest >= 11, f"the smallest text is {smallest:.1f} px on the page"
    assert len(fig.axes) == 2  # two papers here, one panel each
