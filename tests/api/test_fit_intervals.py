"""The intervals of `fit heads` on hand-built outcomes: BudgetedClassifier.sweep's columns and summary.html's words.

evaluate is replaced by hand-built per-text outcomes (two budgets that agree with dense on most texts, as two
budgets of one model do), so the expected numbers are known: the difference of the accuracies, an unpaired
Newcombe interval written out here, and which difference is within noise.
"""

import math
from dataclasses import asdict

import numpy as np
import pytest

from bab.api import fit as fit_module
from bab.api import heads as heads_module
from bab.api.heads import BudgetedClassifier
from bab.heads.recipe import Recipe

Z = 1.959963984540054
N = 500


def wilson(correct, n):
    p = correct / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


def newcombe_width(correct, reference_correct, n):
    (l1, u1), (l2, u2) = wilson(correct, n), wilson(reference_correct, n)
    p, q = correct / n, reference_correct / n
    return 100 * (math.sqrt((p - l1) ** 2 + (u2 - q) ** 2) + math.sqrt((u1 - p) ** 2 + (q - l2) ** 2))


def outcomes():
    """dense; soft @0.50 one point below on a few texts (within noise); hard @0.50 with 40 texts lost
    (beyond noise); soft and hard @1.00 right on exactly the texts dense is."""
    rng = np.random.default_rng(3)
    dense = rng.random(N) < 0.85
    right, wrong = np.flatnonzero(dense), np.flatnonzero(~dense)
    soft = dense.copy()
    soft[right[:7]] = False
    soft[wrong[:2]] = True
    hard = dense.copy()
    hard[right[-40:]] = False
    return {("dense", None): dense, ("soft", 0.5): soft, ("soft", 1.0): dense.copy(), ("hard", 0.5): hard,
            ("hard", 1.0): dense.copy()}


@pytest.fixture
def hand_built_sweep(monkeypatch):
    made = outcomes()

    def fake_evaluate(model, data, budget=None, mode="dense"):
        right = made[mode, budget]
        return {"budget": budget, "mode": mode, "accuracy": 100 * right.mean(), "loss": 0.5,
                "cost": 1.0 if budget is None else budget, "heads_kept": None if mode != "hard" else int(8 * budget),
                "n": right.size, "outcomes": right}

    monkeypatch.setattr(heads_module, "evaluate", fake_evaluate)
    clf = BudgetedClassifier(object(), tokenizer=None, source="hand-built", labels=["a", "b"])
    clf.dense_model = object()  # as after fit: the dense fine-tune is the dense row (the fitted model agrees here)
    clf.dataset = lambda data, **columns: data
    return clf.sweep("texts", budgets=[0.5, 1.0], modes=("soft", "hard")), made


def test_sweep_columns_pair_each_row_with_dense(hand_built_sweep):
    sweep, made = hand_built_sweep
    assert list(sweep.columns[:8]) == ["budget", "mode", "accuracy", "accuracy_low", "accuracy_high", "vs_dense",
                                       "vs_dense_low", "vs_dense_high"]
    assert "outcomes" not in sweep.columns and (sweep["n"] == N).all()
    dense_correct = int(made["dense", None].sum())
    assert sweep["mode"].tolist()[:2] == ["dense", "all heads"] and sweep.attrs["reference"] == "dense"
    for row in sweep.iloc[1:].to_dict("records"):
        right = made["dense", None] if row["mode"] == "all heads" else made[row["mode"], row["budget"]]
        assert row["vs_dense"] == pytest.approx(100 * (right.mean() - made["dense", None].mean()))
        assert row["vs_dense_low"] <= row["vs_dense"] <= row["vs_dense_high"]
        # positively correlated outcomes: the paired interval is no wider than the unpaired one on the same numbers
        paired = row["vs_dense_high"] - row["vs_dense_low"]
        assert paired <= newcombe_width(int(right.sum()), dense_correct, N)
        low, high = wilson(int(right.sum()), N)
        assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx((100 * low, 100 * high), abs=1e-6)
    soft = sweep[sweep["mode"] == "soft"].iloc[0]
    assert soft["vs_dense_low"] < 0 < soft["vs_dense_high"]  # a point lost on 7 of 500 texts, 2 won back
    assert newcombe_width(int(made["soft", 0.5].sum()), dense_correct, N) > 2 * paired  # paired: far narrower


def test_summary_says_which_difference_is_within_noise(hand_built_sweep):
    sweep, _ = hand_built_sweep
    metrics = {"model": "hand-built", "labels": ["a", "b"], "train": "train.csv", "train_texts": 2000, "val": None,
               "test": "test.csv", "report_texts": N, "processes": 1, "threads": 1, "wall_seconds": 1.0,
               "recipe": asdict(Recipe()), "reload": {}}
    page = fit_module.summary_html(metrics, sweep, None)
    soft = sweep[sweep["mode"] == "soft"].iloc[0]
    shown = fit_module.interval_text(soft["vs_dense"], soft["vs_dense_low"], soft["vs_dense_high"])
    assert shown.startswith("\u2212") and " [\u2212" in shown and ", +" in shown  # true minus signs
    assert (f"soft gates @0.50: on 500 test texts a {abs(soft['vs_dense']):.1f}-point difference is within noise: "
            f"the interval of {shown} includes 0.") in page
    hard = sweep[(sweep["mode"] == "hard") & (sweep["budget"] == 0.5)].iloc[0]
    assert hard["vs_dense_high"] < 0
    assert "hard top-k = pruned model @0.50: 8.0 points below dense on 500 test texts, beyond noise" in page
    assert "hard top-k = pruned model @1.00: right and wrong on exactly the same 500 test texts as dense" in page
    table = fit_module.sweep_table(sweep, 8)
    assert table["vs dense (points) [paired 95%]"].iloc[0] == "–"  # dense: no difference from itself
    assert table["vs dense (points) [paired 95%]"].iloc[2] == shown
    assert table["model"].tolist()[:2] == ["dense fine-tune", "fitted, every head"]
    assert "<NA>" not in page and "nan" not in page.lower()
