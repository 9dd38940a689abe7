"""The public API: each method on your own data and model in a few lines (README, "Use it on your own data").

- ``BudgetedClassifier`` (``bab.api.heads``): budgeted head gates on a Hugging Face encoder; fit, sweep,
  predict, prune, save_pretrained / from_pretrained, heatmap, latency.
- ``Recipe``: how ``fit`` trains (epochs, learning rates, batch size, length); ``GateStart``: how its gates start.
- ``read_labeled`` / ``LabelMap`` (``bab.api.data``): CSV, DataFrame or ``datasets`` input, one label mapping.
- ``ContextPruner`` (``bab.api.context``): Dynamic Context Pruning of a pretrained decoder on your text;
  fit, evaluate (perplexity and fraction of context pruned, beside dense).
- ``SparsifinerClassifier`` (``bab.api.vit``): a Sparsifiner ViT on an image folder (one sub-folder per
  class); fit (dense -> predictors -> joint), sweep over keep rates, predict.
- ``fit_heads`` (``bab.api.fit``): what ``python -m bab fit heads`` runs and writes.

This room sits above the method rooms and ``experiments`` (``fit`` runs a study's steps over your data) and below
the CLI.
"""

# Imported on first use, so `from bab import BudgetedClassifier` does not also import the ViT and decoder code.
_PUBLIC = {
    "BudgetedClassifier": "bab.api.heads", "Recipe": "bab.heads.recipe", "GateStart": "bab.heads.train",
    "ContextPruner": "bab.api.context",
    "SparsifinerClassifier": "bab.api.vit", "LabelMap": "bab.api.data", "LabeledTexts": "bab.api.data",
    "read_labeled": "bab.api.data", "fit_heads": "bab.api.fit",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bab.api' has no attribute {name!r}; public names: {__all__}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
