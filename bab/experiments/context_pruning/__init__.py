"""Moving: the module is bab/experiments/context_pruning/study.py."""

from bab.experiments.context_pruning.study import *  # noqa: F403
