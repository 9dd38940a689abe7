"""The soft and hard sweeps of one checkpoint side by side, and the checks the notebooks print on them."""

import pandas as pd
import pytest

from bab.experiments.pipelines.heads import soft_and_hard_sweeps, sweep_checks


def sweeps(total_heads=8):
    budgets = [0.25, 0.5, 1.0]
    soft = pd.DataFrame({"budget": budgets, "cost": [0.3, 0.55, 0.97], "accuracy": [70.0, 80.0, 85.0]})
    # ceil(b * 8) heads kept: 2, 4, 8 of 8
    hard = pd.DataFrame({"budget": budgets, "cost": [2 / total_heads, 4 / total_heads, 1.0],
                         "accuracy": [60.0, 78.0, 85.5]})
    return soft, hard


def test_the_table_has_a_row_per_budget_with_both_sweeps_costs_and_accuracies():
    soft, hard = sweeps()
    table = soft_and_hard_sweeps(soft, hard)
    assert list(table.index) == [0.25, 0.5, 1.0] and table.index.name == "budget"
    assert table.loc[0.5].to_dict() == {"soft cost": 0.55, "soft acc": 80.0, "hard cost": 0.5, "hard acc": 78.0}
    with pytest.raises(ValueError, match="same budgets"):
        soft_and_hard_sweeps(soft, hard.iloc[:2])


def test_the_checks_say_when_a_cost_is_not_monotone_or_a_hard_mask_keeps_the_wrong_heads():
    soft, hard = sweeps()
    assert sweep_checks(soft, hard, 8).splitlines() == [
        "cost monotone over 3 budgets: True (soft)", "cost monotone over 3 budgets: True (hard)",
        "hard top-k keeps exactly ceil(b*L*H) heads at every budget: True"]
    soft.loc[1, "cost"] = 0.2  # below the cost at b = 0.25
    hard.loc[0, "cost"] = 3 / 8  # three heads kept at b = 0.25, where ceil(0.25 * 8) = 2
    lines = sweep_checks(soft, hard, 8).splitlines()
    assert lines[0].endswith("False (soft)") and lines[2].endswith("False")
