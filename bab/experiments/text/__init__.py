"""Moving: the module is bab/experiments/text/study.py."""

from bab.experiments.text.study import *  # noqa: F403
