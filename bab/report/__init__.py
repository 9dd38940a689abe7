"""The report, one module group per job.

``results`` is the contract between a notebook and the report (the rows a notebook saves, the papers' numbers they
are set beside, the seeds a notebook runs at, RECORD.md); ``runner`` runs the notebooks into a report folder;
``claims`` judges the papers' claims on the rows; ``pages`` renders the front page, the notebooks' pages and the
cost figure; ``compare`` sets one build beside another (rows, verdicts, the smoke reference) and merges builds.
The rows and the papers' numbers (``results``) are judged (``claims``) and rendered (``pages``); the runner
and the comparisons use all three, and the smoke reference (``compare.regression``) is what the runner's
refresh stores.
"""
