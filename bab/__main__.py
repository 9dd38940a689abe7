"""The one command line of bab.

    python -m bab report --profile smoke|quick|paper [--only 01,03]   run the notebooks into reports/<profile>/
    python -m bab notebooks refresh [--only 05]                       re-run notebooks/ at profile smoke, in place
    python -m bab bench heads --batch-sizes 1,64                      custom encoder: dense vs hard head skipping
    python -m bab bench bert --budgets 0.25,0.5,0.75                  pretrained encoder: dense vs structurally pruned
    python -m bab bench sparse [--breakdown]                          Sparsifiner attention core vs dense SDPA
    python -m bab bench sparse --model trained|deit-s                 whole ViT: dense vs the fused kernel, images/s
    python -m bab bench generation [--model smollm2]                  context-pruned decoding vs dense
    python -m bab fit heads --train my.csv --budgets 0.25,0.5,0.75 --prune 0.5 --out runs/my   your data
    python -m bab train 07 --profile paper gamma-3 [gamma-3-frozen]    notebook 07's fine-tunes, resumable
    python -m bab evaluate 07 --profile paper gamma-3                  their evaluations, ahead of the notebook
    python -m bab cache [--older-than 30] [--prefix fit-] [--partial] [--remove]   what the run cache holds
    python -m bab train 05 --profile paper heads linformer             notebook 05's trainings (train 05 --help)

Each command is a module of ``bab.commands``, registered there. Every bench command follows one protocol
(``bab.core.timing``): one process, one thread, warm-up, median of interleaved repeats, the analytic limit printed
beside the measured ratio.

Installing the package also gives the console script ``bab`` (pyproject.toml): ``bab fit heads ...``
runs the same as ``python -m bab fit heads ...``.
"""

from __future__ import annotations

import argparse
import sys

from bab.commands import COMMANDS
from bab.commands.common import program_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n")[1])  # the usage lines
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]), run the command, return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, argparse has printed why)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.run(args)
    except args.errors as exc:  # bad input: the error's own advice, exit code 2
        command = " ".join(filter(None, (args.command, getattr(args, "target", None), getattr(args, "action", None))))
        print(f"{program_name()} {command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
