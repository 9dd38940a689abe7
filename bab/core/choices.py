"""A setting chosen among a few names, by argument or environment variable (``$BAB_DEVICE``, ``$BAB_PRECISION``);
an unknown name is refused with the choices, wherever it came from."""

from __future__ import annotations

import os


def check_choice(value: str, choices: tuple[str, ...], owner: str) -> None:
    if value not in choices:
        raise ValueError(f"{owner} must be one of {choices}, got {value!r}")


def choice_from_env(variable: str, choices: tuple[str, ...], default: str) -> str:
    """``$variable`` when set and not blank (checked against ``choices``), else ``default``."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    check_choice(value, choices, f"${variable}")
    return value
