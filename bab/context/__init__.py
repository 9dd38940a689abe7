"""Dynamic Context Pruning: a learned interaction (alpha-sigmoid) that drops context tokens for good,
a GPT-2 decoder that uses it, a KV cache that really removes dropped tokens, and the generation bench.

See docs/context-pruning.md.
"""
