"""``train``: a notebook's declared trainings into the run cache ($BAB_CACHE_DIR), resumed where an interrupted run
stopped, under the keys the notebook's own calls use (``bab.experiments.steps``).

    BAB_THREADS=1 python -m bab train 05 --profile paper heads linformer   notebook 05's head gates and Linformer
    BAB_THREADS=1 python -m bab train 07 --profile paper gamma-3 gamma-3-frozen   notebook 07's gamma = 3 fine-tunes
    BAB_THREADS=1 python -m bab train 03 --seed 7 dense budgeted            notebook 03's run at seed 7
    python -m bab train 05 --help                                           the steps it declares
"""

from __future__ import annotations

from bab.commands.common import add_steps_parser
from bab.core.errors import BadInput, checking
from bab.experiments.steps import NOTEBOOKS


def register(sub) -> None:
    train = sub.add_parser("train", help=f"a notebook's trainings into the run cache: {', '.join(NOTEBOOKS)}")
    notebooks = train.add_subparsers(dest="target", required=True, metavar="NOTEBOOK")
    for notebook in NOTEBOOKS:
        p = add_steps_parser(notebooks, notebook, "training", f"notebook {notebook}'s trainings, by step", _train)
        p.add_argument("--seed", type=int, default=None,
                       help="the seed of the notebook's run to train for (the report runs a seeded notebook at its "
                            "profile's report_seeds); default: the profile's own")


def _train(args) -> int:
    from bab.core.threads import set_threads
    from bab.experiments import profiles
    from bab.experiments.steps import chosen_steps

    entry = NOTEBOOKS[args.notebook]
    with checking():  # the profile, the seed, the steps and the thread count, all before anything trains
        profile = profiles.get_profile(entry.experiment, args.profile)
        if args.seed is not None and not entry.takes_seed:
            raise BadInput(f"notebook {args.notebook} runs at one seed, its profile's: leave out --seed")
        if args.seed is not None and args.seed < 0:
            raise BadInput(f"--seed must be a whole number >= 0, got {args.seed}")
        study = entry.study(profile, progress=True, **({} if args.seed is None else {"seed": args.seed}))
        steps = chosen_steps(entry.training(study), args.steps, profile.name)
        threads = set_threads()  # part of every run's cache key: train with the thread count the notebook will use
    seed = "" if args.seed is None else f", seed {args.seed}"
    print(f"notebook {args.notebook}'s trainings, profile {profile.name}{seed}, {threads} thread(s)")
    for step in steps:
        for what, train in step.runs:
            metrics = train()[1]
            seconds = metrics.get("train_seconds")
            print(f"{what}: {'from the run cache' if metrics.get('cached') else 'trained'}"
                  f"{f', {seconds:.0f} s ({seconds / 3600:.2f} h) of training' if seconds else ''}", flush=True)
    return 0
