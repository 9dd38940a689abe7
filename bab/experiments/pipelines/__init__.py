"""Each method's pipeline: the steps its notebooks (and ``bab.api``'s fits) train and measure through the run cache,
on any data, as ``Study`` subclasses (``bab.experiments.study``). The notebooks' folders size them (profiles),
declare their rows and analyse them; ``bab.api`` runs them on a user's data.

- ``heads``: ``BudgetedStudy``, budgeted heads (notebooks 01-04); ``hard_recipe``: the hard adaptation's recipe
  ablation and summary;
- ``decoder``: ``DecoderStudy``, dynamic context pruning on a decoder (notebooks 06, 07); ``decoder_methods``: the
  rows both report;
- ``vit``: ``ViTStudy``, Sparsifiner and its baselines on a ViT (notebook 05); ``vit_profile``: its profile's shape
  and the connectivity-predictor presets.
"""
