"""``evaluate``: a notebook's slow evaluations into the run cache, ahead of the notebook, which then reads them
(``bab.experiments.steps``); never trains.

    BAB_THREADS=1 python -m bab evaluate 07 --profile paper gamma-3 pretrained   held-out perplexity, zero-shot
"""

from __future__ import annotations

from bab.commands.common import add_steps_parser
from bab.core.errors import BadInput, checking
from bab.experiments.steps import NOTEBOOKS


def register(sub) -> None:
    with_evaluations = [notebook for notebook, entry in NOTEBOOKS.items() if entry.evaluation is not None]
    evaluate = sub.add_parser("evaluate", help=f"a notebook's slow evaluations into the run cache, ahead of it: "
                                               f"{', '.join(with_evaluations)}")
    notebooks = evaluate.add_subparsers(dest="target", required=True, metavar="NOTEBOOK")
    for notebook in with_evaluations:
        add_steps_parser(notebooks, notebook, "evaluation", f"notebook {notebook}'s evaluations, by step "
                                                            "(never trains)", _evaluate)


def _evaluate(args) -> int:
    import time

    from bab.core.runs import CacheMiss, LoadOnlyRunCache
    from bab.core.threads import set_threads
    from bab.experiments import profiles
    from bab.experiments.steps import chosen_steps

    entry = NOTEBOOKS[args.notebook]
    with checking():  # the profile, the steps and the thread count, before anything is evaluated
        profile = profiles.get_profile(entry.experiment, args.profile)
        study = entry.study(profile, cache=LoadOnlyRunCache(), progress=True)
        steps = chosen_steps(entry.evaluation(study), args.steps, profile.name)
        threads = set_threads()  # part of the measurements' keys, as it is of the models': the notebook's count
    for step in steps:
        for what, evaluate in step.runs:
            t0 = time.perf_counter()
            try:
                result = evaluate()
            except CacheMiss as miss:  # the model it reads is not trained: missing input, said instead of training
                raise BadInput(f"{what}: {miss}; train it first (python -m bab train {args.notebook} --profile "
                               f"{profile.name} ...)") from miss
            print(result)
            print(f"{what}, profile {profile.name}, {threads} thread(s): evaluated in {time.perf_counter() - t0:.0f} "
                  f"s (stored measurements are read, not recomputed)", flush=True)
    return 0
