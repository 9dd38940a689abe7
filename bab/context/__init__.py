"""Dynamic Context Pruning on transformers' own decoders: a learned interaction (alpha-sigmoid) that drops context
tokens for good, attached to any causal LM whose attention goes through transformers' attention interface (GPT-2,
Llama/SmolLM2, Qwen2, Mistral, ...; ``attach.attach``), a ``Cache`` that really removes dropped tokens so
``model.generate`` decodes with pruning (``pruned_cache.PrunedCache``), training-free eviction policies on a cache of
the same kind (``eviction``, ``evicting_cache``), static sparse baselines, pretrained-decoder sources
(``pretrained.load_decoder``), and the generation bench.

    from bab.context.attach import attach
    from bab.context.interaction import PruningConfig
    from bab.context.pruned_cache import PrunedCache

    model = attach(AutoModelForCausalLM.from_pretrained(...), PruningConfig(r=64))   # then fine-tune (train_lm)
    model.generate(ids, past_key_values=PrunedCache(), max_new_tokens=64)

See docs/context-pruning.md.
"""

# Part of the run-cache key of every model this method trains (bab.core.runs.train_cached). Bump it whenever
# training semantics change (a loss, a schedule, an RNG draw, a fix), so a checkpoint trained before is never served.
# 2: every LMTrainConfig and PruningConfig field enters the key (no field left out at a default any more), and
# the study lineages are built by the one Study base.
# 3: the models are transformers' own decoders with the method attached (bab's GPT-2 and Llama retired)
TRAINING_VERSION = 3
# Part of the key of every cached measurement of this method (bab.experiments.study.Study.measured: held-out
# perplexity, zero-shot scores). Bump it whenever evaluation or scoring change what they return.
# 2: a choice item's context runs once for all its choices (sums in another order: a score may move in the last bits)
# 3: held-out evaluations return each window's log-likelihood and token count (intervals over windows), and
# zero-shot scores each item's outcome (paired intervals over items)
# 4: both also return each window's or item's fingerprint (unit_ids), which pairs two rows unit by unit
# 5: transformers' own decoders (attached) evaluated, and generation through model.generate
EVALUATION_VERSION = 5
