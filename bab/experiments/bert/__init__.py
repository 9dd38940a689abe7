"""Moving: the module is bab/experiments/bert/study.py."""

from bab.experiments.bert.study import *  # noqa: F403
