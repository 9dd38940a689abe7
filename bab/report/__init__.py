"""The report: the results contract notebooks write, the papers' numbers, and the papermill -> HTML build.
"""
