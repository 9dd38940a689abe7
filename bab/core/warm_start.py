"""The warm start every method uses: a trained model's weights copied into a model that adds modules to it.

A budget-gated model starts from its dense parent (the gates are new), a Sparsifiner model from its dense
ViT (the connectivity predictors are new), a context-pruning decoder from its dense decoder (the interaction
modules are new), a hard-adapted model from its soft parent (nothing is new). Anything else that differs,
a weight the source lacks outside the new modules, a weight the target lacks, a shape, means the two
models were not built from one config, and is refused before any training starts.
"""

from __future__ import annotations

import torch


def warm_start(target: torch.nn.Module, source: torch.nn.Module, new_modules: tuple[str, ...] = ("gates",)
               ) -> torch.nn.Module:
    """Copy every weight of ``source`` into ``target`` (in place; returns it).

    ``new_modules``: names of the modules only ``target`` has (a weight whose dotted name has one of them as a
    component, e.g. ``gates.theta`` or ``blocks.0.attention.interaction.w_q``); they keep their initialisation.
    When ``source`` has them too (a hard adaptation starting from the soft checkpoint) they are copied as well.
    Raises ValueError naming every weight that is missing, unexpected or of another shape.
    """
    target_state, source_state = target.state_dict(), source.state_dict()
    missing = [k for k in target_state if k not in source_state and not _in_modules(k, new_modules)]
    unexpected = [k for k in source_state if k not in target_state]
    mismatched = [f"{k} {tuple(source_state[k].shape)} -> {tuple(target_state[k].shape)}" for k in source_state
                  if k in target_state and source_state[k].shape != target_state[k].shape]
    if missing or unexpected or mismatched:
        new = ", ".join(f"`{name}`" for name in new_modules) or "none"
        added = f" with only {new} added" if new_modules else ""
        raise ValueError(
            f"warm start: the models differ beyond the new modules ({new}): missing {missing}, unexpected "
            f"{unexpected}, shape mismatch {mismatched}; build the target from the source model's config{added}")
    target.load_state_dict(source_state, strict=False)
    return target


def _in_modules(key: str, modules: tuple[str, ...]) -> bool:
    parts = key.split(".")[:-1]
    return any(name in parts for name in modules)
