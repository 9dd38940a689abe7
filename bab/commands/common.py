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
    """The timing protocol's two counts, as every bench command takes them."""
    p.add_argument("--warmup", type=int, default=warmup, help="untimed runs of each configuration first")
    p.add_argument("--repeats", type=int, default=repeats, help="interleaved timed repeats; the median is reported")


def add_decoder_choice(p, pretrained: bool = False) -> None:
    """Which of notebook 07's decoders a train / evaluate command means (``pretrained``: the downloaded one too)."""
    p.add_argument("--profile", default="paper", help="the notebook's profile (smoke, quick, paper)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--gamma", type=float, help="the per-gamma specialist with this gamma (one of the profile's)")
    which.add_argument("--budgeted", action="store_true", help="the budget-conditioned fine-tune")
    which.add_argument("--dense", action="store_true",
                       help="the dense fine-tune (same protocol, no pruning): the like-for-like reference")
    if pretrained:
        which.add_argument("--pretrained", action="store_true", help="the pretrained decoder itself (nothing trained)")
    p.add_argument("--frozen", action="store_true", help="with --gamma: the frozen twin (pretrained weights fixed)")


def check_decoder_choice(args, profile) -> None:
    """ValueError when ``args`` (train / evaluate decoder) name a run notebook 07 never uses."""
    if args.gamma is not None and args.gamma not in profile.gammas:
        raise ValueError(f"gamma {args.gamma:g} is not one of profile {profile.name!r}'s gammas "
                         f"{list(profile.gammas)}; notebook 07 would never use its run")
    if args.frozen and args.gamma is None:
        raise ValueError("--frozen goes with --gamma (only the per-gamma specialists have a frozen twin)")
