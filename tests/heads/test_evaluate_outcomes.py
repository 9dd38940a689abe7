"""evaluate's per-example outcomes, and the intervals built on them (interval_columns).

References are written out here: a loop that scores one example at a time, Wilson's and Newcombe's closed
forms, and the normal approximation of a paired mean difference.
"""

import math

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.evaluate import budget_sweep, evaluate, interval_columns

Z = 1.959963984540054  # the 97.5% normal quantile


def tiny_model_and_data(n=45):
    torch.manual_seed(1)
    model = EncoderClassifier(EncoderConfig(vocab_size=20, num_classes=3, max_len=8, d_model=16, num_heads=4,
                                            num_layers=2, d_ff=32, gates="budget")).eval()
    ids = torch.randint(1, 20, (n, 8))
    labels = torch.randint(0, 3, (n,))  # random labels: some right, some wrong
    return model, TensorDataset(ids, labels)


def wilson(correct, n):
    p = correct / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


def newcombe(correct, reference_correct, n):
    """Newcombe's hybrid score interval of a difference of two proportions, in points (unpaired)."""
    p, q = correct / n, reference_correct / n
    (l1, u1), (l2, u2) = wilson(correct, n), wilson(reference_correct, n)
    d = p - q
    return 100 * (d - math.sqrt((p - l1) ** 2 + (u2 - q) ** 2)), 100 * (d + math.sqrt((u1 - p) ** 2 + (q - l2) ** 2))


@pytest.mark.parametrize("budget, mode", [(None, "dense"), (0.3, "soft"), (0.5, "hard")])
def test_outcomes_are_each_examples_argmax_against_its_label(budget, mode):
    model, data = tiny_model_and_data()
    ids, labels = data.tensors
    expected = []
    with torch.no_grad():
        for i in range(len(labels)):  # one example at a time, in data order
            logits = model(ids[i:i + 1], budget=budget, mode=mode).logits
            expected.append(bool(logits.argmax(-1).item() == labels[i].item()))
    stats = evaluate(model, data, budget=budget, mode=mode, batch_size=7)  # batches that do not divide the set
    assert isinstance(stats["outcomes"], np.ndarray) and stats["outcomes"].dtype == bool
    assert stats["outcomes"].tolist() == expected
    assert 0 < sum(expected) < len(expected)  # a mix, so order and count both matter
    assert stats["n"] == len(labels)
    assert stats["accuracy"] == pytest.approx(100 * stats["outcomes"].mean())


def test_budget_sweep_keeps_the_count_and_leaves_the_arrays_out():
    model, data = tiny_model_and_data()
    sweep = budget_sweep(model, data, budgets=(0.25, 1.0))
    assert "outcomes" not in sweep.columns
    assert sweep["n"].tolist() == [len(data), len(data)]
    assert sweep["accuracy"].dtype == float


def correlated_outcomes(n=500, seed=0, worse=6, better=2):
    """Dense outcomes and a model's that agree on all but ``worse`` texts dense got right and ``better`` it got
    wrong: strongly positively correlated, as two budgets of one model are."""
    rng = np.random.default_rng(seed)
    dense = rng.random(n) < 0.85
    model = dense.copy()
    model[rng.choice(np.flatnonzero(dense), worse, replace=False)] = False
    model[rng.choice(np.flatnonzero(~dense), better, replace=False)] = True
    return dense, model


@pytest.mark.parametrize("worse, better", [(6, 2), (30, 0), (0, 0), (3, 9)])
def test_paired_interval_contains_the_difference_and_beats_newcombe(worse, better):
    dense, model = correlated_outcomes(worse=worse, better=better)
    n = dense.size
    columns = interval_columns({"outcomes": model}, {"outcomes": dense})
    difference = 100 * (model.mean() - dense.mean())
    assert columns["vs_dense"] == pytest.approx(difference)
    assert columns["vs_dense_low"] <= columns["vs_dense"] <= columns["vs_dense_high"]
    low, high = newcombe(int(model.sum()), int(dense.sum()), n)
    assert columns["vs_dense_high"] - columns["vs_dense_low"] <= high - low
    # about the normal approximation of a paired mean: 1.96 standard errors of the per-text differences
    d = 100 * (model.astype(float) - dense.astype(float))
    half = Z * d.std(ddof=1) / math.sqrt(n)
    assert (columns["vs_dense_high"] - columns["vs_dense_low"]) == pytest.approx(2 * half, rel=0.35, abs=1e-9)
    # the accuracy's interval is Wilson's
    wl, wh = wilson(int(model.sum()), n)
    assert (columns["accuracy_low"], columns["accuracy_high"]) == pytest.approx((100 * wl, 100 * wh), abs=1e-6)


def test_within_and_beyond_noise_on_hand_built_outcomes():
    dense, few = correlated_outcomes(worse=6, better=2)  # -0.8 points: 8 texts that differ cannot show it
    _, many = correlated_outcomes(worse=30, better=0)  # -6 points, every change a loss
    near = interval_columns({"outcomes": few}, {"outcomes": dense})
    far = interval_columns({"outcomes": many}, {"outcomes": dense})
    assert near["vs_dense_low"] < 0 < near["vs_dense_high"]
    assert far["vs_dense_high"] < 0
    same = interval_columns({"outcomes": dense}, {"outcomes": dense})
    assert same["vs_dense"] == same["vs_dense_low"] == same["vs_dense_high"] == 0
    alone = interval_columns({"outcomes": dense}, None)  # the dense row: no difference from itself
    assert all(math.isnan(alone[k]) for k in ("vs_dense", "vs_dense_low", "vs_dense_high"))
