"""Sparsifiner: a low-rank connectivity predictor choosing the top-k keys of every query, the sparse
attention kernels, their attachment to transformers' ViT and DeiT, Linformer and token pruning baselines, and the
speed bench.

See docs/sparsifiner.md.
"""

# Part of the run-cache key of every model this method trains (bab.core.runs.train_cached). Bump it whenever
# training semantics change (a loss, a schedule, an RNG draw, a fix), so a checkpoint trained before is never served.
# 2: the connectivity predictor's down-projection uses each head's own W_down and each example's own token
# positions (version 1 summed W_down over the heads, and over the batch after token pruning).
# 3: ViT study lineages name the gate start (gate_start) and whether heads-hard selects.
# 4: the predictor's top-k ranks S alone; A_down W~_up only orders keys tied exactly at the k-th place (it was
# added to S with weight 1e-3, which also reordered keys that did not tie), so the kept connections differ.
# 5: notebook 05's models are transformers' ViTs with Sparsifiner attached (its predictors and Linformer projections
# inside each attention module); the budgeted-heads objectives moved to the heads method.
TRAINING_VERSION = 5
