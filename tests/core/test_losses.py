import pytest
import torch
import torch.nn.functional as F

from bab.core.losses import budget_loss, distillation_loss


def test_budget_loss_matches_eq5():
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.3]])
    labels = torch.tensor([0, 1])
    ce = F.cross_entropy(logits, labels)
    cost = torch.tensor(0.7)
    # over budget: both the cost term and the squared violation
    got = budget_loss(logits, labels, cost, 0.5, lambda_cost=0.1, lambda_viol=4.0)
    torch.testing.assert_close(got, ce + 0.1 * 0.7 + 4.0 * 0.2**2)
    # under budget: no violation term
    got = budget_loss(logits, labels, torch.tensor(0.3), 0.5, lambda_cost=0.1, lambda_viol=4.0)
    torch.testing.assert_close(got, ce + 0.1 * 0.3)


def test_two_sided_budget_loss_also_penalises_a_cost_under_budget():
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.3]])
    labels = torch.tensor([0, 1])
    ce = F.cross_entropy(logits, labels)
    got = budget_loss(logits, labels, torch.tensor(0.3), 0.5, lambda_cost=0.0, lambda_viol=4.0, two_sided=True)
    torch.testing.assert_close(got, ce + 4.0 * 0.2**2)
    got = budget_loss(logits, labels, torch.tensor(0.7), 0.5, lambda_cost=0.1, lambda_viol=4.0, two_sided=True)
    torch.testing.assert_close(got, ce + 0.1 * 0.7 + 4.0 * 0.2**2)


def test_distillation_loss_matches_eq6_and_vanishes_for_identical_logits():
    torch.manual_seed(0)
    student, teacher = torch.randn(4, 3), torch.randn(4, 3)
    labels = torch.tensor([0, 1, 2, 0])
    T, beta = 2.0, 0.3
    kl = (F.softmax(teacher / T, -1) * (F.log_softmax(teacher / T, -1) - F.log_softmax(student / T, -1))).sum(-1).mean()
    expected = (1 - beta) * F.cross_entropy(student, labels) + beta * T**2 * kl
    torch.testing.assert_close(distillation_loss(student, teacher, labels, beta, T), expected)
    same = distillation_loss(student, student, labels, 1.0, T)
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_distillation_does_not_train_the_teacher():
    student = torch.randn(2, 3, requires_grad=True)
    teacher = torch.randn(2, 3, requires_grad=True)
    distillation_loss(student, teacher, torch.tensor([0, 1]), 0.5, 2.0).backward()
    assert teacher.grad is None and student.grad is not None


@pytest.mark.parametrize("beta, T", [(-0.1, 2.0), (1.5, 2.0), (0.5, 0.0)])
def test_bad_distillation_settings_raise(beta, T):
    with pytest.raises(ValueError):
        distillation_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0]), beta, T)
