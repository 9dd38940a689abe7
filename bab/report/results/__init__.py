"""The results contract: what a notebook hands to the report, and what it is set beside.

A notebook saves its rows with ``contract.save_results`` (validated: declared methods, budgets, provenance) and ends
with ``notebook_end.finish_notebook``, which shows them beside the papers' numbers (``paper``, the one place a paper
number is typed) and saves them. ``seeds`` says which notebooks run once per seed and averages their rows;
``record`` writes a report folder's RECORD.md from its results.json and run records alone.
"""
