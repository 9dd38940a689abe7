"""The flags that chose what ``python -m bab report`` does before it had subcommands, kept for one release: each is
run as its subcommand after one line on stderr with the new spelling."""

from __future__ import annotations

import argparse
import shlex

# flag's dest -> (subcommand, the handler in bab.commands.report); checked in this order, at most one given
LEGACY_MODES = {
    "record_only": ("pages", "run_pages"),
    "pages_only": ("pages", "run_pages"),
    "timings": ("timings", "run_timings"),
    "save_plan": ("timings", "run_timings"),
    "merge": ("merge", "run_merge"),
    "rows_against": ("compare", "run_compare"),
    "verdicts_against": ("compare", "run_compare"),
}
DEFAULTS = {"profile": "quick", "reports_dir": "reports", "notebooks_dir": "notebooks", "only": None}


def add_legacy_arguments(parser) -> None:
    """The old mode flags, hidden from --help."""
    for flag in ("--record-only", "--pages-only", "--merge", "--rows-against", "--verdicts-against"):
        parser.add_argument(flag, default=None, help=argparse.SUPPRESS)
    for flag in ("--timings", "--save-plan"):
        parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)


def _options(args, *names) -> list[str]:
    """The options among ``names`` given other than their defaults, as command-line words."""
    words = []
    for name in names:
        if getattr(args, name) != DEFAULTS[name]:
            words += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return words


def new_spelling(args, dest: str) -> tuple[str, str]:
    """The subcommand line that does what the old flag ``dest`` did (as one shell-quoted string), and the name of
    its handler; ``args`` is completed with what that handler reads."""
    action, handler = LEGACY_MODES[dest]
    value = getattr(args, dest)
    args.action, args.folder, args.record_only = action, value, dest == "record_only"
    args.save_plan, args.rows, args.verdicts = dest == "save_plan", args.rows_against, args.verdicts_against
    words = {"record_only": [value, "--record-only"], "pages_only": [value, *_options(args, "notebooks_dir")],
             "timings": _options(args, "profile", "reports_dir"),
             "save_plan": [*_options(args, "profile", "reports_dir"), "--save-plan"],
             "merge": [value, *_options(args, "profile", "reports_dir", "only", "notebooks_dir")],
             "rows_against": ["--rows", value, *_options(args, "profile", "reports_dir")],
             "verdicts_against": ["--verdicts", value, *_options(args, "profile", "reports_dir")]}[dest]
    return shlex.join(["report", action, *words]), handler
