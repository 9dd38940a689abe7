"""The result-row contract's optional language-model columns, and the comparison table that shows them."""

import math

import pytest

from bab.report.results.contract import validate_rows
from bab.report.results.paper import CONTEXT_PRUNING, PAPER_RESULTS, comparison_table

LM_ROW = {"experiment": "gpt2_context_pruning", "method": "context pruning, ~80% of context pruned", "budget": 0.2,
          "cost": 0.19, "accuracy": None, "speedup": 2.3, "perplexity": 61.5, "memory_ratio": 3.9}


def test_optional_perplexity_and_memory_ratio_are_validated():
    clean = validate_rows([LM_ROW, {**LM_ROW, "perplexity": None, "memory_ratio": None}])
    assert clean[0]["perplexity"] == 61.5 and clean[1]["memory_ratio"] is None
    plain = {k: v for k, v in LM_ROW.items() if k not in ("perplexity", "memory_ratio")}
    assert "perplexity" not in validate_rows([plain])[0]  # absent stays absent
    with pytest.raises(ValueError, match="'perplexity' must be a float"):
        validate_rows([{**LM_ROW, "perplexity": "61"}])
    with pytest.raises(ValueError, match="'memory_ratio' must be finite"):
        validate_rows([{**LM_ROW, "memory_ratio": math.inf}])


def test_comparison_table_shows_perplexity_columns_only_when_present():
    table = comparison_table([LM_ROW, {**LM_ROW, "method": "dense", "budget": 1.0, "cost": 1.0, "speedup": 1.0,
                                       "perplexity": 60.0, "memory_ratio": 1.0}])
    assert {"perplexity (ours)", "memory_ratio (ours)", "speedup (paper)"} <= set(table.columns)
    row = table[table.method == "context pruning, ~80% of context pruned"].iloc[0]
    assert row["speedup (paper)"] == 2.0 and row["speedup (ours)"] == 2.3 and row["perplexity (ours)"] == 61.5
    # the paper gives no perplexity number in our text: that column would be empty and is dropped
    assert "perplexity (paper)" not in table.columns
    classification = comparison_table([{"experiment": "synthetic", "method": "dense", "budget": 1.0, "cost": 1.0,
                                        "accuracy": 99.0, "speedup": None}])
    assert not any(c.startswith(("perplexity", "memory_ratio")) for c in classification.columns)


def test_context_pruning_paper_rows_are_registered():
    assert all(row in PAPER_RESULTS for row in CONTEXT_PRUNING)
    headline = CONTEXT_PRUNING[0]
    assert headline["speedup"] == 2.0 and headline["cost"] == 0.2
