"""Training objectives of Budgeted Attention Allocation (Eq. 5-6 of its paper; docs/budgeted-heads.md)."""

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
    two_sided: bool = False,
    *,
    ce: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 5: CE + lambda_cost * C(b) + lambda_viol * max(0, C(b) - b)^2.

    ``two_sided=True`` (beyond the paper) penalises any miss, lambda_viol * (C(b) - b)^2: for a cost that
    cross-entropy barely pulls up (the keep mass of context pruning), so that the delivered cost tracks b
    from below as well as from above. ``ce``: CE(logits, labels) where the caller has computed it already (a
    language model's is a pass over [B * T, vocabulary] logits, too dear to compute twice).
    """
    ce = F.cross_entropy(logits, labels) if ce is None else ce
    violation = cost - budget if two_sided else torch.clamp(cost - budget, min=0.0)
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
                         gamma: float, *, ce: torch.Tensor | None = None) -> torch.Tensor:
    """Dynamic Context Pruning: next-token CE + gamma * mean keep mass (arXiv 2305.15805; docs/context-pruning.md).

    logits [B, T, V], targets [B, T]; keep_mass: the mean of I over layers and pairs k > j; ``ce``: the CE of
    these logits where the caller has computed it already (``next_token_ce``).
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    ce = next_token_ce(logits, targets) if ce is None else ce
    return ce + gamma * keep_mass


def next_token_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [B, T, V] against targets [B, T]."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# -- Sparsifiner (Eq. 8-10 of the Sparsifiner paper; docs/sparsifiner.md) ----------------------------------


def token_distillation_loss(tokens: torch.Tensor, teacher_tokens: torch.Tensor) -> torch.Tensor:
    """Eq. 8: MSE between the student's and the teacher's tokens after the last block ([B, n, D] each)."""
    if tokens.shape != teacher_tokens.shape:
        raise ValueError(f"token distillation needs equal shapes, got {tuple(tokens.shape)} and "
                         f"{tuple(teacher_tokens.shape)}; token pruning changes n, so use it at evaluation only")
    return F.mse_loss(tokens, teacher_tokens.detach())


def kl_distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Eq. 9: KL divergence between the teacher's and the student's class distributions (batch mean)."""
    return F.kl_div(F.log_softmax(student_logits, dim=-1), F.log_softmax(teacher_logits.detach(), dim=-1),
                    reduction="batchmean", log_target=True)


def attention_distillation_loss(scores: list[torch.Tensor], teacher_attention: list[torch.Tensor]) -> torch.Tensor:
    """Eq. 10: MSE between each layer's connectivity scores A~_down W~_up and the teacher's attention
    probabilities ([B, H, n, n] each), averaged over layers."""
    if len(scores) != len(teacher_attention) or not scores:
        raise ValueError(f"need one teacher attention map per layer, got {len(scores)} and {len(teacher_attention)}")
    return torch.stack([F.mse_loss(s, t.detach()) for s, t in zip(scores, teacher_attention, strict=True)]).mean()
