"""What the command modules share: the help formatter, the bench protocol's options, decoder choices."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

WIDE = {"display.width": 200, "display.max_columns": 20}


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help appends "(default: ...)" to an option, unless it has no default to show (None, a flag's False)
    or its help already says what the default is."""

    def _get_help_string(self, action):
        help = action.help or ""
        if action.default in (None, False) or action.required or "(default" in help:
            return help
        return super()._get_help_string(action)


def flat(options: dict) -> list:
    """{"a": 1, "b": 2} -> ["a", 1, "b", 2], for ``pandas.option_context``."""
    return [x for kv in options.items() for x in kv]


def print_table(heading: str, table, note: str, precision: int = 3) -> None:
    """A bench's table as every bench prints it: the heading, the rows at ``precision`` decimals, the note."""
    import pandas as pd

    print(heading)
    with pd.option_context(*flat(WIDE), "display.precision", precision):
        print(table.to_string(index=False))
    print(note)


def program_name() -> str:
    """What the user typed: ``bab`` for the console script, ``python -m bab`` otherwise."""
    return "bab" if Path(sys.argv[0]).name == "bab" else "python -m bab"


def add_grid_arguments(p, batch_sizes: str) -> None:
    """The batch size x budget grid both head benches time; the singular flags are aliases."""
    p.add_argument("--budgets", "--budget", dest="budgets", default="0.25,0.5,0.75",
                   help="comma-separated fractions of heads kept, each in (0, 1] (default: %(default)s)")
    p.add_argument("--batch-sizes", "--batch-size", dest="batch_sizes", default=batch_sizes,
                   help="comma-separated batch sizes, each >= 1; 1 = one request at a time (default: %(default)s)")
    p.add_argument("--examples", type=int, default=64,
                   help="examples per timed pass, at every batch size (64: 64 one-example batches at batch 1)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per example")


def add_repeat_arguments(p, warmup: int, repeats: int) -> None:
    """The timing protocol's counts, as every bench command takes them."""
    p.add_argument("--warmup", type=int, default=warmup, help="untimed runs of each configuration first")
    p.add_argument("--repeats", type=int, default=repeats, help="interleaved timed repeats; the median is reported")
    add_target_arguments(p)


def add_target_arguments(p) -> None:
    """--interval-target and --max-repeats: time until the speed-ups are known to a stated fraction
    (``bab.core.timing.Repeats``)."""
    p.add_argument("--interval-target", type=float, default=None, metavar="FRACTION",
                   help="go on past --repeats until each speed-up's 95%% interval (over the paired repeats) lies "
                        "within FRACTION of it on both sides, e.g. 0.02 for +-2%%")
    p.add_argument("--max-repeats", type=int, default=None,
                   help="with --interval-target: the most repeats to time (default: 10 x --repeats)")


def repeats_of(args, repeats: int):
    """``bab.core.timing.Repeats`` from --repeats (``repeats`` where not given), --interval-target and
    --max-repeats."""
    from bab.core.timing import Repeats

    minimum = repeats if args.repeats is None else args.repeats
    if args.interval_target is None:
        if args.max_repeats is not None:
            raise ValueError("--max-repeats bounds an --interval-target: give --interval-target FRACTION too, or "
                             "time a fixed number with --repeats alone")
        return Repeats(minimum)
    return Repeats(minimum, args.interval_target, 10 * minimum if args.max_repeats is None else args.max_repeats)


class StepsHelp(argparse.Action):
    """``-h`` / ``--help`` of ``train NN`` and ``evaluate NN``: the usual help, then the notebook's steps at the profile
    given before it (default paper), listed by the study itself (``bab.experiments.steps``; imported only here, so
    the other commands start without torch)."""

    def __init__(self, option_strings, dest, kind: str, notebook: str, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and the "
                         "notebook's steps, then exit", **kwargs)
        self.kind, self.notebook = kind, notebook

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        for line in step_lines(self.kind, self.notebook, getattr(namespace, "profile", None) or "paper"):
            print(line)
        parser.exit()


def step_lines(kind: str, notebook: str, profile_name: str) -> list[str]:
    """The ``kind`` ("training" or "evaluation") steps of ``notebook`` at ``profile_name``, one line each."""
    from bab.experiments import profiles
    from bab.experiments.steps import NOTEBOOKS

    entry = NOTEBOOKS[notebook]
    study = entry.study(profiles.get_profile(entry.experiment, profile_name), cache=False, progress=False)
    steps = (entry.training if kind == "training" else entry.evaluation)(study)
    width = max(len(name) for name in steps)
    return [f"\n{kind} steps at profile {profile_name} (in the order given; each through the run cache):",
            *[f"  {name:<{width}}  {step.description}" for name, step in steps.items()]]


def add_steps_parser(sub, notebook: str, kind: str, help: str, run) -> argparse.ArgumentParser:
    """The parser of ``train NN`` / ``evaluate NN``: STEP names, --profile, and a help listing the steps."""
    p = sub.add_parser(notebook, help=help, add_help=False, formatter_class=DefaultsFormatter)
    p.add_argument("--profile", default="paper", help="the notebook's profile (smoke, quick, record, paper)")
    p.add_argument("-h", "--help", action=StepsHelp, kind=kind, notebook=notebook)
    p.add_argument("steps", nargs="+", metavar="STEP", help="what to run, in the order given (listed below)")
    p.set_defaults(run=run, notebook=notebook)
    return p
