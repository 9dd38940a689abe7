"""The public API: each method on your own data and model in a few lines (README, "Use it on your own data").

- ``BudgetedClassifier`` (``bab.api.heads``): budgeted head gates on a Hugging Face encoder; fit, sweep,
  predict, prune, save_pretrained / from_pretrained, heatmap, latency.
- ``Recipe``: how ``fit`` trains (epochs, learning rates, batch size, length).
- ``read_labeled`` / ``LabelMap`` (``bab.api.data``): CSV, DataFrame or ``datasets`` input, one label mapping.
- ``ContextPruner`` (``bab.api.context``): Dynamic Context Pruning of a pretrained decoder on your text;
  fit, evaluate (perplexity and fraction of context pruned, beside dense).
- ``fit_heads`` (``bab.api.fit``): what ``python -m bab fit heads`` runs and writes.

This room sits above the method rooms and ``experiments`` (it chains their steps) and below the CLI.
"""

from bab.api.data import LabeledTexts, LabelMap, read_labeled
from bab.api.heads import BudgetedClassifier, Recipe

__all__ = ["BudgetedClassifier", "ContextPruner", "LabelMap", "LabeledTexts", "Recipe", "read_labeled"]
