"""Training objectives of Budgeted Attention Allocation (METHOD_NOTES.md, section 1, Eq. 5-6)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def budget_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    cost: torch.Tensor,
    budget: float,
    lambda_cost: float,
    lambda_viol: float,
) -> torch.Tensor:
    """Eq. 5: CE + lambda_cost * C(b) + lambda_viol * max(0, C(b) - b)^2."""
    ce = F.cross_entropy(logits, labels)
    violation = torch.clamp(cost - budget, min=0.0)
    return ce + lambda_cost * cost + lambda_viol * violation.pow(2)


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    beta: float,
    temperature: float,
) -> torch.Tensor:
    """Eq. 6: (1 - beta) * CE + beta * T^2 * KL(teacher || student), both softened by T."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    ce = F.cross_entropy(student_logits, labels)
    kl = F.kl_div(
        F.log_softmax(student_logits / temperature, dim=-1),
        F.log_softmax(teacher_logits.detach() / temperature, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    return (1.0 - beta) * ce + beta * temperature**2 * kl


def context_pruning_loss(logits: torch.Tensor, targets: torch.Tensor, keep_mass: torch.Tensor,
                         gamma: float) -> torch.Tensor:
    """Dynamic Context Pruning: next-token CE + gamma * mean keep mass (METHOD_NOTES.md, section 2).

    logits [B, T, V], targets [B, T]; keep_mass: the mean of I over layers and pairs k > j.
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return ce + gamma * keep_mass
