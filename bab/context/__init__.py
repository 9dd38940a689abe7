"""Dynamic Context Pruning: a learned interaction (alpha-sigmoid) that drops context tokens for good,
GPT-2 and Llama-family decoders (SmolLM2) that use it through one shared loop (decoder.py), static
sparse baselines, pretrained-decoder sources (``pretrained.load_decoder``), a KV cache that really
removes dropped tokens, and the generation bench.

See docs/context-pruning.md.
"""

# Part of the run-cache key of every model this method trains (bab.core.runs.train_cached). Bump it whenever
# training semantics change (a loss, a schedule, an RNG draw, a fix), so a checkpoint trained before is never served.
# 2: every LMTrainConfig and PruningConfig field enters the key (no field left out at a default any more), and
# the study lineages are built by the one Study base.
TRAINING_VERSION = 2
# Part of the key of every cached measurement of this method (bab.experiments.study.Study.measured: held-out
# perplexity, zero-shot scores). Bump it whenever evaluation or scoring change what they return.
# 2: a choice item's context runs once for all its choices (sums in another order: a score may move in the last bits)
# 3: held-out evaluations return each window's log-likelihood and token count (intervals over windows), and
# zero-shot scores each item's outcome (paired intervals over items)
# 4: both also return each window's or item's fingerprint (unit_ids), which pairs two rows unit by unit
EVALUATION_VERSION = 4
