"""Notebook 06's study: a small GPT-2 on LM text, context-pruning fine-tunes, evaluation, throughput (Dynamic Context
Pruning, arXiv 2305.15805, at CPU scale).

Every trained model goes through the run cache (``bab.experiments.study.Study``), keyed by its whole lineage
(data, model shape, training config, and for fine-tunes the dense run it started from).

- ``dense()``: offline, a GPT-2-shaped model trained from scratch on ``$BAB_DATA_DIR/lm`` with a
  BPE tokenizer fitted on the training split; ``base="gpt2"`` (online) loads pretrained GPT-2 and
  its tokenizer instead.
- ``pruned(gamma, r, irreversible)``: the dense weights plus fresh interaction modules, fine-tuned
  with CE + gamma * keep mass, alpha 1 -> 8 (the paper's recipe).
- ``budget_conditioned()``: one fine-tune whose interaction bias takes the requested keep budget.
- ``dense_fine_tuned()``: the dense model continued for the specialists' steps with their recipe, no interactions
  (the like-for-like dense reference); ``static_fine_tuned(kind, size)``: the same under a static mask.
- ``evaluate(model)``: validation perplexity and fraction of context pruned (hard decisions);
  ``static_baselines(...)``: the paper's local-window and strided masks at the same fraction pruned
  (bab.experiments.pipelines.decoder, shared with notebook 07), untouched and fine-tuned under the mask
  (``static_fine_tuned_baselines``).
- ``throughput(...)``: generation tokens/s and KV-cache memory against dense (bab.context.bench).

Modules: ``profiles`` (``ContextPruningProfile``, ``GPT2_CONTEXT_PRUNING``, ``BUDGETS``), ``study``
(``ContextPruningStudy``, the declared rows ``GPT2_METHODS``). ``closest_to`` and ``interpolate_specialists``
(``bab.experiments.pipelines.decoder``) are re-exported for the notebook.
"""

from bab.experiments.context_pruning.profiles import BUDGETS, GPT2_CONTEXT_PRUNING, ContextPruningProfile
from bab.experiments.context_pruning.study import EXPERIMENT, GPT2_METHODS, METHOD_SETS, ContextPruningStudy
from bab.experiments.pipelines.decoder import closest_to, interpolate_specialists

__all__ = ["BUDGETS", "EXPERIMENT", "GPT2_CONTEXT_PRUNING", "GPT2_METHODS", "METHOD_SETS", "ContextPruningProfile",
           "ContextPruningStudy", "closest_to", "interpolate_specialists"]
