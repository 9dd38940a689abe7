"""Budgeted Attention Allocation: per-head gates conditioned on a budget, hard top-k head skipping,
structural head pruning of Hugging Face encoders, the post-hoc baseline, compute analysis and speed.

See docs/budgeted-heads.md.
"""
