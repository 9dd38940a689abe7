"""Budgeted Attention Allocation: per-head gates conditioned on a budget, hard top-k head skipping,
structural head pruning of Hugging Face encoders, the post-hoc baseline, compute analysis and speed.

See docs/budgeted-heads.md.
"""

# Part of the run-cache key of every model this method trains (bab.core.runs.train_cached). Bump it whenever
# training semantics change (a loss, a schedule, an RNG draw, a fix), so a checkpoint trained before is never served.
# 2: every TrainConfig field enters the key (no field left out at a default any more), and the gate start is
# named ``gate_start`` (it was ``gate_init``); the study lineages name their selection and warm starts alike.
# 3: the custom encoder trims the trailing padding a batch shares, so dropout draws (and float rounding) differ.
TRAINING_VERSION = 3
# Part of the key of every measurement of this method's models kept in the run cache (``Study.measured``: the
# BERT studies' head importance). Bump it whenever what a kept measurement computes changes.
EVALUATION_VERSION = 1
