"""Notebook 06's study: a small GPT-2 on LM text, context-pruning fine-tunes, evaluation, throughput (Dynamic Context
Pruning, arXiv 2305.15805, at CPU scale).

Every trained model goes through the run cache (``bab.experiments.study.Study``), keyed by its whole lineage
(data, model shape, training config, and for fine-tunes the dense run it started from). The steps are
``ContextPruningStudy``'s: ``dense`` (a GPT-2-shaped model trained here on ``$BAB_DATA_DIR/lm`` with its own BPE
tokenizer; pretrained GPT-2 online with ``base="gpt2"``), ``pruned(gamma)``, ``budget_conditioned``,
``dense_fine_tuned`` and ``static_fine_tuned``; the measurements (perplexity and fraction pruned, the static
baselines, throughput) are ``DecoderStudy``'s (``bab.experiments.pipelines.decoder``, shared with notebook 07).

Modules: ``profiles`` (``ContextPruningProfile``, ``GPT2_CONTEXT_PRUNING``, ``BUDGETS``), ``study``
(``ContextPruningStudy``, the declared rows ``GPT2_METHODS``). ``closest_to`` and ``interpolate_specialists``
(``bab.experiments.pipelines.decoder``) are re-exported for the notebook.
"""

from bab.experiments.context_pruning.profiles import BUDGETS, GPT2_CONTEXT_PRUNING, ContextPruningProfile
from bab.experiments.context_pruning.study import EXPERIMENT, GPT2_METHODS, METHOD_SETS, ContextPruningStudy
from bab.experiments.pipelines.decoder import closest_to, interpolate_specialists

__all__ = ["BUDGETS", "EXPERIMENT", "GPT2_CONTEXT_PRUNING", "GPT2_METHODS", "METHOD_SETS", "ContextPruningProfile",
           "ContextPruningStudy", "closest_to", "interpolate_specialists"]
