"""The one knob every method shares: a requested budget, a fraction in (0, 1], checked, parsed and mapped to
the logit the budget-conditioned modules take (the head gates, bab.heads.gates; the context interaction,
bab.context.interaction).
"""

from __future__ import annotations

import math
from numbers import Real

import torch

# Budgets are clipped to [eps, 1 - eps] before the logit so b = 1.0 stays finite. The paper does
# not publish eps; 1e-3 keeps logit(b) within about +-6.9.
DEFAULT_EPS = 1e-3


def validate_fraction(value, name: str, meaning: str, advice: str) -> float:
    """The one knob's check: ``value`` as a float in (0, 1], or an error naming ``name``, what it means and
    how to fix it. Every mechanism's budget (heads, context tokens, key connections) goes through it."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a single number, got a tensor of shape {tuple(value.shape)}; "
                             f"pass one {name} per forward call")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number in (0, 1], got {value!r} ({type(value).__name__})")
    value = float(value)
    if not (0.0 < value <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must lie in (0, 1] ({meaning}), got {value}; {advice}")
    return value


def validate_budget(budget) -> float:
    """Return ``budget`` as a float, or raise an error that says how to fix it."""
    return validate_fraction(budget, "budget", "the fraction of attention heads to keep",
                             "use 1.0 for full attention and e.g. 0.25 to keep a quarter of the heads")


def parse_fractions(text: str, flag: str, what: str, check, example: str) -> list[float]:
    """A command line's list of fractions, "0.5,0.25" -> [0.5, 0.25] in the order given, each through ``check`` (the
    mechanism's own validator of a ``what``); errors name ``flag`` and show an ``example``."""
    try:
        values = [float(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers in (0, 1], e.g. {example}; got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} needs at least one {what} in (0, 1], e.g. {example}; got {text!r}")
    return [check(v) for v in values]


def parse_budgets(text: str) -> list[float]:
    """"0.25,0.5,0.75" -> [0.25, 0.5, 0.75] (sorted, repeats dropped), each checked to lie in (0, 1]."""
    return sorted(set(parse_fractions(text, "--budgets", "budget", validate_budget, "0.25,0.5,0.75")))


def budget_logit(budget: float, eps: float = DEFAULT_EPS) -> float:
    """logit(clip(b, eps, 1 - eps)): the budget input of Eq. 1."""
    b = min(max(validate_budget(budget), eps), 1.0 - eps)
    return math.log(b / (1.0 - b))
