import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import TensorDataset

from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.evaluate import SWEEP_BUDGETS, budget_sweep, evaluate, gates_are_monotone, is_monotone, spearman
from bab.heads.posthoc import head_importance, posthoc_mask


def model_and_data(gates=None):
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=20, num_classes=2, max_len=10, d_model=16, num_heads=4,
                                            num_layers=2, d_ff=32, gates=gates)).eval()
    ids = torch.randint(1, 20, (40, 10))
    return model, TensorDataset(ids, (ids[:, 1] > 10).long())


def test_sweep_budgets_are_the_papers_19_points():
    assert len(SWEEP_BUDGETS) == 19
    assert SWEEP_BUDGETS[0] == 0.10 and SWEEP_BUDGETS[-1] == 1.00
    assert np.allclose(np.diff(SWEEP_BUDGETS), 0.05)


def test_evaluate_reports_accuracy_and_cost_per_mode():
    model, data = model_and_data("budget")
    logits = model(data.tensors[0], mode="dense").logits
    expected = 100.0 * (logits.argmax(-1) == data.tensors[1]).float().mean().item()
    dense = evaluate(model, data, batch_size=7)  # batches that do not divide the set
    assert dense["accuracy"] == pytest.approx(expected)
    assert dense["cost"] == 1.0
    assert evaluate(model, data, budget=0.5, mode="hard")["cost"] == 0.5
    soft = evaluate(model, data, budget=0.3, mode="soft")
    assert soft["cost"] == pytest.approx(model.gates(0.3).detach().mean().item())


def test_sweep_and_monotonicity_helpers():
    model, data = model_and_data("budget")
    sweep = budget_sweep(model, data, budgets=(0.2, 0.6, 1.0))
    assert list(sweep.budget) == [0.2, 0.6, 1.0]
    assert is_monotone(sweep.cost)
    assert gates_are_monotone(model)
    assert not is_monotone([1, 3, 2])
    assert is_monotone([3, 2, 1], increasing=False)
    assert is_monotone([1, 0.999, 2], tol=0.01)


def test_spearman_of_identical_and_reversed_rankings():
    a = np.arange(8.0)
    assert spearman(a, a * 3 + 1) == pytest.approx(1.0)
    assert spearman(a, -a) == pytest.approx(-1.0)


def test_head_importance_is_the_loss_increase_of_masking_one_head():
    model, data = model_and_data()
    scores = head_importance(model, data)
    assert scores.shape == (2, 4)
    base = evaluate(model, data)["loss"]
    mask = torch.ones(2, 4)
    mask[1, 2] = 0
    masked = evaluate(model, data, mode="hard", head_mask=mask)["loss"]
    assert float(scores[1, 2]) == pytest.approx(masked - base, abs=1e-6)


@pytest.mark.parametrize("budget", [0.1, 0.25, 0.5, 0.75, 1.0])
def test_posthoc_mask_keeps_the_most_important_heads_under_the_floor(budget):
    importance = torch.tensor([[5.0, 4.0, 3.0, 2.0], [0.1, 0.2, 0.0, -1.0]])
    mask = posthoc_mask(importance, budget)
    assert torch.all(mask.sum(1) >= 1)
    assert mask[1, 1] == 1  # the best head of the weak layer is always kept
    assert int(mask.sum()) == max(int(np.ceil(budget * 8 - 1e-9)), 2)
    assert isinstance(pd.DataFrame(mask.numpy()), pd.DataFrame)


def test_gate_ranking_reports_correlation_and_nesting():
    from bab.heads.evaluate import gate_ranking

    model, _ = model_and_data("budget")
    with torch.no_grad():
        model.gates.theta.copy_(torch.arange(8.0).view(2, 4))  # one fixed ranking at every budget
    ranking = gate_ranking(model, 0.25, 0.75)
    assert ranking["spearman"] == pytest.approx(1.0)
    assert ranking["low_topk_kept_at_high"] and (ranking["heads_low"], ranking["heads_high"]) == (2, 6)
    with torch.no_grad():  # head 0 wins at low budgets (theta high, no sensitivity), loses at high ones
        model.gates.theta.copy_(torch.tensor([[3.0, 0, 0, 0], [0, 0, 0, 0]]))
        model.gates.raw_sensitivity.copy_(torch.tensor([[-20.0, 5, 5, 5], [5, 5, 5, 5]]))
    assert not gate_ranking(model, 0.25, 0.75)["low_topk_kept_at_high"]
