"""Notebook 01's study: the synthetic marked-token task (budgeted-attention paper, sections 6.1-6.2), step by step.

``SyntheticExperiment`` supplies the data and the model shape; the training steps are the shared ones of
``bab.experiments.pipelines.heads.BudgetedStudy``, each cached by its whole lineage: the dense model over a grid of data
and optimisation seeds, budgeted gates trained from scratch and warm-started from dense, static specialists,
post-hoc pruning and the hard adaptation. Results are validation accuracy, as in the paper's synthetic tables.

Modules: ``profiles`` (``SyntheticProfile``, ``SYNTHETIC``), ``study`` (``SyntheticExperiment``, the declared rows
``SYNTHETIC_METHODS``, ``synthetic_rows``).
"""

from bab.experiments.synthetic.profiles import SYNTHETIC, SyntheticProfile
from bab.experiments.synthetic.study import (
    EXPERIMENT,
    METHOD_SETS,
    SYNTHETIC_METHODS,
    SyntheticExperiment,
    synthetic_rows,
)

__all__ = ["EXPERIMENT", "METHOD_SETS", "SYNTHETIC", "SYNTHETIC_METHODS", "SyntheticExperiment", "SyntheticProfile",
           "synthetic_rows"]
