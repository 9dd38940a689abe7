"""Rendering: the HTML a reader opens, built from a report folder's files.

``index`` merges the notebooks' rows into results.json and renders index.html (``template.html``): the claims
table, the cost figure, the notebooks' status; ``figures`` draws the one cost-axis figure; ``notebook_pages``
converts each executed notebook into a page that reads offline (MathJax from ``static/``, no machine paths).
"""
