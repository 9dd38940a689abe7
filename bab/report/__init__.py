"""The report, one module group per job.

``results`` is the contract between a notebook and the report (the rows a notebook saves, the papers' numbers they
are set beside, the seeds a notebook runs at, RECORD.md); ``runner`` runs the notebooks into a report folder;
``claims`` judges the papers' claims on the rows; ``pages`` renders the front page, the notebooks' pages and the
cost figure; ``compare`` sets one build beside another (rows, verdicts, the smoke reference) and merges builds.
Data flows results -> claims -> pages; the runner and the comparisons use all three.
"""
