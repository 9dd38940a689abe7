import math

import pytest
import torch

from bab.core.budget import budget_logit, validate_budget
from bab.heads.evaluate import SWEEP_BUDGETS
from bab.heads.gates import (
    BudgetGates,
    StaticGates,
    estimated_cost,
    hard_topk_mask,
    hard_topk_mask_with_floor,
    head_ablation_importance,
    head_elimination_importance,
    nest_gates_by_importance_,
    num_heads_to_keep,
    straight_through,
)


def random_gates(L=4, H=4, seed=0):
    torch.manual_seed(seed)
    gates = BudgetGates(L, H)
    with torch.no_grad():
        gates.theta.normal_(0, 2)
        gates.raw_sensitivity.normal_(0, 1)
    return gates


@pytest.mark.parametrize("seed", range(5))
def test_budget_gates_are_monotone_in_budget(seed):
    gates = random_gates(seed=seed)
    with torch.no_grad():
        values = torch.stack([gates(b) for b in SWEEP_BUDGETS])  # [19, L, H]
    assert torch.all(values[1:] >= values[:-1]), "every gate must be non-decreasing in b"
    costs = [float(estimated_cost(v)) for v in values]
    assert costs == sorted(costs)


def test_budget_one_stays_finite_and_sensitivity_is_nonnegative():
    gates = random_gates()
    assert math.isfinite(budget_logit(1.0))
    assert torch.isfinite(gates(1.0)).all()
    assert torch.all(gates.sensitivity >= 0)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.0001, 2, float("nan"), float("inf")])
def test_budget_outside_unit_interval_raises_clear_error(bad):
    with pytest.raises(ValueError, match=r"budget must lie in \(0, 1\]"):
        validate_budget(bad)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        BudgetGates(2, 2)(bad)


@pytest.mark.parametrize("bad", ["0.5", None, True, [0.5]])
def test_budget_of_wrong_type_raises(bad):
    with pytest.raises(TypeError, match="budget must be a number"):
        validate_budget(bad)


def test_static_gates_ignore_budget_but_validate_it():
    gates = StaticGates(2, 3)
    torch.testing.assert_close(gates(0.2), gates(0.9))
    with pytest.raises(ValueError):
        gates(0.0)


@pytest.mark.parametrize("L,H", [(2, 8), (4, 4), (6, 12), (1, 3)])
@pytest.mark.parametrize("budget", SWEEP_BUDGETS)
def test_hard_topk_keeps_exactly_ceil_b_times_heads(L, H, budget):
    scores = torch.rand(L, H)
    mask = hard_topk_mask(scores, budget)
    expected = math.ceil(round(budget * L * H, 9))
    assert int(mask.sum()) == expected
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    # the kept heads are the largest scores
    kept_min = scores[mask.bool()].min()
    if expected < L * H:
        assert kept_min >= scores[~mask.bool()].max()


def test_worked_example_of_method_notes():
    # budget 0.10 on 16 heads -> 2 heads -> cost 0.125
    assert num_heads_to_keep(0.10, 16) == 2
    assert float(hard_topk_mask(torch.rand(2, 8), 0.10).mean()) == 0.125
    # floating point: 0.3 * 10 = 3.0000000000000004 must still keep 3 heads
    assert num_heads_to_keep(0.3, 10) == 3


@pytest.mark.parametrize("budget", SWEEP_BUDGETS)
def test_floor_variant_never_empties_a_layer(budget):
    torch.manual_seed(1)
    # one layer dominates every score, so a plain global top-k empties the others at low budgets
    scores = torch.rand(4, 4)
    scores[0] += 10
    mask = hard_topk_mask_with_floor(scores, budget)
    assert torch.all(mask.sum(dim=1) >= 1)
    assert int(mask.sum()) == max(num_heads_to_keep(budget, 16), 4)


def test_global_topk_can_empty_a_layer_that_the_floor_keeps():
    scores = torch.tensor([[9.0, 8.0], [1.0, 0.5]])
    assert hard_topk_mask(scores, 0.5)[1].sum() == 0
    assert hard_topk_mask_with_floor(scores, 0.5)[1].sum() == 1


def test_straight_through_forward_is_hard_and_gradient_is_soft():
    soft = torch.tensor([0.2, 0.9, 0.6], requires_grad=True)
    hard = torch.tensor([0.0, 1.0, 1.0])
    out = straight_through(hard, soft)
    assert torch.equal(out.detach(), hard)
    (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    torch.testing.assert_close(soft.grad, torch.tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("kwargs", [dict(num_layers=0, num_heads=2), dict(num_layers=2, num_heads=2, temperature=0),
                                    dict(num_layers=2, num_heads=2, eps=0.7)])
def test_malformed_gate_configs_raise(kwargs):
    with pytest.raises(ValueError):
        BudgetGates(**kwargs)


def test_validate_fraction_names_the_knob_its_meaning_and_the_fix():
    from bab.core.budget import validate_fraction

    with pytest.raises(ValueError, match=r"^token_keep must lie in \(0, 1\] \(share kept\), got 1.5; use 0.5$"):
        validate_fraction(1.5, "token_keep", "share kept", "use 0.5")
    with pytest.raises(ValueError, match=r"keep must be a single number, got a tensor of shape \(2,\)"):
        validate_fraction(torch.tensor([0.1, 0.2]), "keep", "share kept", "use 0.5")
    with pytest.raises(TypeError, match="keep must be a number in"):
        validate_fraction(True, "keep", "share kept", "use 0.5")
    assert validate_fraction(torch.tensor(0.25), "keep", "share kept", "use 0.5") == 0.25
    assert validate_fraction(1, "keep", "share kept", "use 0.5") == 1.0


# ----------------------------------------------------------------------------- gates nested by importance


def test_nested_gates_open_at_the_hand_computed_budgets():
    # 4 heads, importance order (1, 0), (0, 1), (0, 0), (1, 1): ranks 0..3 open at b = 1/8, 3/8, 5/8, 7/8
    gates = BudgetGates(2, 2, temperature=0.5)
    importance = torch.tensor([[0.2, 0.9], [1.5, -0.1]])
    nest_gates_by_importance_(gates, importance, sharpness=3.0)
    opens_at = torch.tensor([[5 / 8, 3 / 8], [1 / 8, 7 / 8]])
    for (layer, head), b in zip([(0, 0), (0, 1), (1, 0), (1, 1)], opens_at.flatten().tolist(), strict=True):
        assert gates(b)[layer, head].item() == pytest.approx(0.5, abs=1e-6)
    # the slope in logit(b) is the sharpness: g = sigmoid(3 * (logit(b) - logit(b_h)))
    b = 0.3
    expected = torch.sigmoid(3.0 * (math.log(b / (1 - b)) - torch.logit(opens_at.double()))).float()
    torch.testing.assert_close(gates(b), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("budget", [0.25, 0.5, 0.75])
def test_nested_gates_keep_the_most_important_heads_and_nest_across_budgets(budget):
    torch.manual_seed(0)
    gates = BudgetGates(4, 4)
    importance = torch.randn(4, 4)
    nest_gates_by_importance_(gates, importance)
    k = num_heads_to_keep(budget, 16)
    most_important = torch.zeros(16)
    most_important[torch.argsort(importance.flatten(), descending=True)[:k]] = 1
    assert torch.equal(hard_topk_mask(gates(budget), budget).flatten(), most_important)
    # about b * N gates are open, so the soft cost starts near the budget
    assert abs(gates(budget).mean().item() - budget) < 0.05


def test_nested_static_gates_are_the_nested_budget_gates_at_their_own_budget():
    # the specialist for b = 3/8 starts with the same gate values (and so the same top-k) as nested budget gates
    importance = torch.tensor([[0.2, 0.9], [1.5, -0.1]])
    budget_gates, static_gates = BudgetGates(2, 2, temperature=0.5), StaticGates(2, 2, temperature=0.5)
    nest_gates_by_importance_(budget_gates, importance, sharpness=3.0)
    nest_gates_by_importance_(static_gates, importance, sharpness=3.0, budget=3 / 8)
    torch.testing.assert_close(static_gates(), budget_gates(3 / 8), atol=1e-6, rtol=0)
    # hand-computed: head (0, 1) opens at 3/8, so its gate is exactly 1/2 there
    assert static_gates()[0, 1].item() == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(ValueError, match="budget="):
        nest_gates_by_importance_(StaticGates(2, 2), importance)


def test_nested_gates_reject_bad_input_with_advice():
    gates = BudgetGates(2, 3)
    with pytest.raises(ValueError, match="shape"):
        nest_gates_by_importance_(gates, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="NaN"):
        nest_gates_by_importance_(gates, torch.tensor([[0.0, float("nan"), 1.0], [0.0, 1.0, 2.0]]))
    with pytest.raises(ValueError, match="sharpness"):
        nest_gates_by_importance_(gates, torch.zeros(2, 3), sharpness=0.0)


def test_head_ablation_importance_is_the_loss_increase_of_masking_each_head_alone():
    # a made-up loss: each masked head adds its own cost, and heads (0, 0) and (1, 1) together add more
    cost = torch.tensor([[1.0, 0.5, 0.0], [2.0, 0.25, 3.0]])
    calls = []

    def loss_with_mask(mask):
        calls.append(mask.clone())
        dropped = 1 - mask
        return 10.0 + float((cost * dropped).sum()) + 7.0 * float(dropped[0, 0] * dropped[1, 1])

    importance = head_ablation_importance(loss_with_mask, 2, 3)
    torch.testing.assert_close(importance, cost)  # one head at a time: the interaction term never fires
    assert len(calls) == 7 and torch.equal(calls[0], torch.ones(2, 3))
    assert all(int((c == 0).sum()) == 1 for c in calls[1:])


def test_head_elimination_sees_redundant_heads_that_one_at_a_time_ablation_misses():
    # heads (0, 0) and (0, 1) are redundant copies: the loss rises by 5 only when both are gone;
    # head (1, 0) costs 1 alone and (1, 1) costs 0.5 alone
    def loss_with_mask(mask):
        dropped = 1 - mask
        return float(5.0 * dropped[0, 0] * dropped[0, 1] + 1.0 * dropped[1, 0] + 0.5 * dropped[1, 1])

    ablation = head_ablation_importance(loss_with_mask, 2, 2)
    torch.testing.assert_close(ablation, torch.tensor([[0.0, 0.0], [1.0, 0.5]]))  # the copies look useless
    elimination = head_elimination_importance(loss_with_mask, 2, 2)
    # by hand: step 0 removes (0, 0) (loss 0, tie with (0, 1) broken by order); step 1 removes (1, 1)
    # (0.5 < 1 < 5); step 2 removes (1, 0) (1 < 5); (0, 1), the surviving copy, is kept longest
    torch.testing.assert_close(elimination, torch.tensor([[0.0, 3.0], [2.0, 1.0]]))
