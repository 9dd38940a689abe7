"""Comparing builds: one report folder beside another, or beside the stored smoke reference.

``row_changes`` pairs every accuracy and perplexity of two builds with its interval (``report compare --rows``),
``verdict_changes`` each claim's verdict beside an earlier one (``report compare --verdicts``), ``regression`` a
smoke run's rows against tests/reference/ (nbval's check), and ``merge`` copies the finished runs of another build
into a report folder (``report merge``).
"""
