"""Moving: the module is bab/experiments/synthetic/study.py."""

from bab.experiments.synthetic.study import *  # noqa: F403
