"""Dynamic context pruning's recipe for a user's own decoder and text: what ``ContextPruner.fit`` and ``fit context``
train. Notebooks 06 and 07 size their own profiles; tuning them never changes this recipe.

A pretrained decoder takes small steps (lr 1e-4) and the fresh interaction modules big ones (pruning_lr 1e-2), as
notebook 07 splits them; gamma 0.1 (the keep-mass weight) prunes moderately, larger drops more; the
budget-conditioned variant draws the keep budget per batch from [0.05, 0.8] with a one-sided violation weight of 50.
"""

from __future__ import annotations

from bab.context.train import LMTrainConfig


def fit_config(context: int = 128, budget_conditioned: bool = False) -> LMTrainConfig:
    """The training config ``ContextPruner.fit`` starts from (its ``steps`` and overrides set at fit time)."""
    objective = "budget_context" if budget_conditioned else "context_pruning"
    return LMTrainConfig(objective=objective, context=context, batch_size=8, lr=1e-4, pruning_lr=1e-2,
                         gamma=0.0 if budget_conditioned else 0.1, budget_min=0.05, budget_max=0.8, lambda_viol=50.0)
