"""Accuracy, cost, budget sweeps, monotonicity and rank correlation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from bab.core.budget import validate_budget
from bab.core.outcomes import keep_units, unit_ids
from bab.core.statistics import paired_difference, proportion_interval
from bab.core.training import distributed_state, make_accelerator

# The paper's sweep: 19 requested budgets 0.10, 0.15, ..., 1.00.
SWEEP_BUDGETS = tuple(round(0.10 + 0.05 * i, 2) for i in range(19))


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: Dataset,
    budget: float | None = None,
    mode: str = "dense",
    head_mask: torch.Tensor | None = None,
    batch_size: int = 256,
) -> dict:
    """Accuracy (%), mean loss and estimated attention cost of ``model`` on ``data``.

    Cost is the mean soft gate mass in soft mode (Eq. 3), the kept fraction of heads in hard or
    skip mode (k / (L*H)), and 1.0 in dense mode. ``heads_kept`` counts the heads a hard mask keeps
    (None in dense and soft mode). With an explicit ``head_mask`` and no ``budget``, ``budget`` reports
    the mask's kept fraction, so no hard row is left without one.

    Under ``accelerate launch`` (more than one process) each process scores its shard of ``data`` and
    the per-example results are gathered (``gather_for_metrics``, which drops the padding of an uneven
    last batch), so every process returns the metrics of the whole of ``data``.

    ``outcomes``: whether each example of ``data`` was classified right (a numpy bool array in data order), so
    two models scored on the same ``data`` can be compared example by example (a paired interval,
    ``interval_columns``); ``unit_ids``: each example's fingerprint (``bab.core.outcomes.unit_ids``), which
    matches the examples of two evaluations; ``n``: how many examples were scored.
    """
    if budget is not None:
        budget = validate_budget(budget)
    model.eval()
    state = distributed_state()
    loader = DataLoader(data, batch_size=batch_size)
    accelerator = None
    if state.num_processes > 1:
        accelerator = make_accelerator()
        loader = accelerator.prepare_data_loader(loader)
    correct, losses, ids, weights = [], [], [], None
    device = next(model.parameters()).device  # a model trained on a GPU stays there
    for input_ids, labels in loader:
        batch_ids = torch.from_numpy(unit_ids(input_ids, labels))
        input_ids, labels = input_ids.to(device), labels.to(device)
        out = model(input_ids, budget=budget, mode=mode, head_mask=head_mask)
        batch = (out.logits.argmax(-1) == labels, F.cross_entropy(out.logits, labels, reduction="none"),
                 batch_ids.to(device))
        if accelerator is not None:
            batch = accelerator.gather_for_metrics(batch)
        correct.append(batch[0])
        losses.append(batch[1])
        ids.append(batch[2])
        weights = out.head_mask  # gates depend on the budget only, so every batch has the same cost
    correct, losses = torch.cat(correct), torch.cat(losses)
    cost = 1.0 if weights is None else float(out.cost)
    hard = mode in ("hard", "skip") and weights is not None
    heads_kept = int(weights.detach().round().sum()) if hard else None
    if budget is None and head_mask is not None and hard:
        budget = heads_kept / weights.numel()
    seen = correct.numel()
    return {"budget": budget, "mode": mode, "accuracy": 100.0 * correct.sum().item() / seen,
            "loss": losses.double().sum().item() / seen, "cost": cost, "heads_kept": heads_kept,
            "n": seen, "outcomes": correct.cpu().numpy().astype(bool), "unit_ids": torch.cat(ids).cpu().numpy()}


def interval_columns(stats: dict, dense: dict | None) -> dict:
    """95% intervals of one ``evaluate`` result: its accuracy's Wilson interval (``accuracy_low``,
    ``accuracy_high``, in %) and, against ``dense`` (another model's ``evaluate`` on the same data), the
    difference in points with its paired bootstrap interval (``vs_dense``, ``vs_dense_low``, ``vs_dense_high``;
    NaN where ``dense`` is None, e.g. the dense row itself). Pairing example by example removes the noise the
    two models share, so where they tend to get the same examples right (two budgets of one model) the interval
    is narrower than one from the two accuracies alone."""
    outcomes = np.asarray(stats["outcomes"], dtype=bool)
    low, high = proportion_interval(int(outcomes.sum()), outcomes.size)
    accuracy = 100.0 * outcomes.mean()
    columns = {"accuracy_low": min(100 * low, accuracy), "accuracy_high": max(100 * high, accuracy)}
    if dense is None:
        return {**columns, "vs_dense": np.nan, "vs_dense_low": np.nan, "vs_dense_high": np.nan}
    difference = paired_difference(100.0 * outcomes, 100.0 * np.asarray(dense["outcomes"], dtype=float))
    return {**columns, "vs_dense": difference.value, "vs_dense_low": difference.low, "vs_dense_high": difference.high}


def budget_sweep(model, data, budgets=SWEEP_BUDGETS, mode: str = "soft", batch_size: int = 256) -> pd.DataFrame:
    """Evaluate one checkpoint at many requested budgets: one row per budget (``evaluate``'s columns; the
    per-example ``outcomes`` and ``unit_ids`` are kept out of the columns, in ``table.attrs["units"]``:
    ``bab.core.outcomes.row_units``)."""
    rows = [evaluate(model, data, budget=b, mode=mode, batch_size=batch_size) for b in budgets]
    table = pd.DataFrame([{k: v for k, v in row.items() if k not in ("outcomes", "unit_ids")} for row in rows])
    return keep_units(table, rows)


@torch.no_grad()
def gates_by_budget(model, budgets) -> dict[float, np.ndarray]:
    """Soft gates [L, H] at each budget, for heatmaps."""
    return {float(b): model.gates(b).detach().cpu().numpy() for b in budgets}


def is_monotone(values, increasing: bool = True, tol: float = 0.0) -> bool:
    """True when ``values`` never step the wrong way by more than ``tol``."""
    diffs = np.diff(np.asarray(values, dtype=float))
    return bool(np.all(diffs >= -tol) if increasing else np.all(diffs <= tol))


def spearman(a, b) -> float:
    """Spearman rank correlation of two equally long score vectors (e.g. gates at two budgets)."""
    return float(pd.Series(np.ravel(a)).corr(pd.Series(np.ravel(b)), method="spearman"))


def gates_are_monotone(model, budgets=SWEEP_BUDGETS) -> bool:
    """Every single gate g_lh(b) is non-decreasing over ``budgets`` (sorted ascending)."""
    stacked = np.stack(list(gates_by_budget(model, sorted(budgets)).values()))  # [n_budgets, L, H]
    return bool(np.all(np.diff(stacked, axis=0) >= 0))


@torch.no_grad()
def topk_nested(model, budgets=SWEEP_BUDGETS) -> bool:
    """Every head kept by hard top-k at a budget is also kept at every larger budget.

    Monotone gates alone do not guarantee this (two gates with different sensitivities can
    cross), so it is measured, as the paper reports it for BERT-Mini.
    """
    masks = [model.head_mask_for(b).bool() for b in sorted(budgets)]
    return all(bool(torch.all(~low | high)) for low, high in zip(masks, masks[1:], strict=False))


@torch.no_grad()
def gate_ranking(model, low: float = 0.25, high: float = 0.75) -> dict:
    """How stable the head ranking is across budgets (the paper's gate-ranking analysis).

    Spearman correlation of the soft gates at ``low`` and ``high``, and whether every head in the
    hard top-k at ``low`` is also in the top-k at ``high``.
    """
    low_mask, high_mask = model.head_mask_for(low).bool(), model.head_mask_for(high).bool()
    return {"spearman": spearman(model.gates(low).detach(), model.gates(high).detach()),
            "low_topk_kept_at_high": bool(torch.all(~low_mask | high_mask)),
            "heads_low": int(low_mask.sum()), "heads_high": int(high_mask.sum())}
