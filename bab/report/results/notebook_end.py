"""The end every notebook shares: its rows beside the papers' numbers, handed to the report, and its run time."""

from __future__ import annotations

import time

import pandas as pd

from bab.core.ledger import RunLedger
from bab.report.results.contract import save_results
from bab.report.results.paper import comparison_table


def finish_notebook(rows, results_path, started: float, ledger: RunLedger) -> pd.DataFrame:
    """Show ``rows`` beside the papers' numbers (``paper.comparison_table``), save them with ``ledger``'s record
    (the study's: its models, measurements and outcomes) where the report reads them (``contract.save_results``;
    ``results_path`` is the parameter papermill injects) and print the notebook's run time since ``started`` (its
    ``time.perf_counter()`` at the top). Returns the comparison table."""
    from IPython.display import display  # the notebook's own display, so the table renders as the cell's output

    comparison = comparison_table(rows)
    display(comparison)
    save_results(rows, results_path, ledger)
    print(f"notebook run time {time.perf_counter() - started:.0f} s")
    return comparison
