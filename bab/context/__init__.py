"""Dynamic Context Pruning: a learned interaction (alpha-sigmoid) that drops context tokens for good,
a GPT-2 decoder that uses it, a KV cache that really removes dropped tokens, and the generation bench.

See docs/context-pruning.md.
"""

# Part of the run-cache key of every model this method trains (bab.core.runs.train_cached). Bump it whenever
# training semantics change (a loss, a schedule, an RNG draw, a fix), so a checkpoint trained before is never served.
TRAINING_VERSION = 1
