"""The one command line of bab.

    python -m bab report run --profile smoke|quick|record|paper [--only 01,03]  notebooks into reports/<profile>/
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
    LD_PRELOAD="$(python -m bab mkl-override)" CMD                    MKL's AVX-512 kernels on an AMD CPU, by hand

Each command is a module of ``bab.commands``, registered there. Every bench command follows one protocol
(``bab.core.timing``): one process, one thread, warm-up, median of interleaved repeats, the analytic limit printed
beside the measured ratio.

Bad input (a file, a value, a flag) is refused before any work starts: one line, exit code 2 (``bab.core.errors``).
An error once the work has begun prints its traceback, and where an unfinished training left a resumable checkpoint
in the run cache, where it is: exit code 1.

On an AMD CPU with AVX-512 the commands that compute in this process (bench, fit, train, evaluate) give MKL its
AVX-512 kernels for the process (``bab.core.blas``, said on stderr); ``--no-mkl-override`` leaves MKL alone.

Installing the package also gives the console script ``bab`` (pyproject.toml): ``bab fit heads ...``
runs the same as ``python -m bab fit heads ...``.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

from bab.commands.common import program_name
from bab.core.errors import BadInput, checking

# The commands that run torch in this process. Where bab.core.blas applies they load its library at start-up, before
# anything imports torch: the report's kernels get it too, so a model `train` stores is the one they look up.
COMPUTING = ("bench", "fit", "train", "evaluate")
NO_MKL_OVERRIDE = "--no-mkl-override"


def build_parser() -> argparse.ArgumentParser:
    from bab.commands import COMMANDS  # imports torch: after the MKL override, never on `import bab.__main__`

    parser = argparse.ArgumentParser(prog=program_name(), description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n")[1])  # the usage lines
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    for name in COMPUTING:
        for leaf in _leaf_parsers(sub.choices[name]):
            leaf.add_argument(NO_MKL_OVERRIDE, dest="mkl_override", action="store_false",
                              help="leave MKL's vendor check alone: its AVX2 kernels on an AMD CPU (default: its "
                                   "AVX-512 kernels there, bab.core.blas; elsewhere nothing changes)")
    return parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers under ``parser`` that take options (those without subcommands of their own)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    children = dict.fromkeys(child for action in subs for child in action.choices.values())  # aliases once
    return [leaf for child in children for leaf in _leaf_parsers(child)]


def mkl_override_at_start(argv: list[str]) -> bool:
    """Load bab.core.blas's library into this process for a computing command, unless ``--no-mkl-override`` (or
    ``--help``); True where MKL now takes its AVX-512 kernels on this AMD CPU. Nothing happens elsewhere, and
    nothing once torch is imported (a test calling ``main`` in its own process)."""
    refused = any(len(a) > len("--no-m") and NO_MKL_OVERRIDE.startswith(a) for a in argv)  # argparse's prefixes too
    if not argv or argv[0] not in COMPUTING or refused or {"-h", "--help"} & set(argv):
        return False
    from bab.core.blas import load_vendor_shim, wants_vendor_shim

    return wants_vendor_shim() and load_vendor_shim()


def main(argv=None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]), run the command, return its exit code: 0, 2 for bad input refused
    before any work, 1 for a failure once the work began (its traceback printed)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with checking():  # a bad $BAB_MKL_VENDOR_SHIM
            overridden = mkl_override_at_start(argv)
    except BadInput as exc:
        print(f"{program_name()}: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, argparse has printed why)
        return exc.code if isinstance(exc.code, int) else 2
    command = " ".join(filter(None, (args.command, getattr(args, "target", None), getattr(args, "action", None))))
    if overridden:
        from bab.core.blas import describe

        print(f"{program_name()} {command}: {describe()}; {NO_MKL_OVERRIDE} leaves MKL alone", file=sys.stderr)
    started = time.time()
    try:
        return args.run(args)
    except BadInput as exc:  # refused by the command's checks, before any work: the error's own advice
        print(f"{program_name()} {command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # raised once the work began: a failure, shown whole
        traceback.print_exc()
        print(f"{program_name()} {command}: failed (the traceback above){resumable_note(started)}", file=sys.stderr)
        return 1


def resumable_note(since: float) -> str:
    """Where the run cache holds resumable checkpoints written since ``since`` (an unfinished training of this
    command: running it again resumes there), as the end of a sentence; "" where there are none."""
    try:
        from bab.core.runs import PARTIAL, default_cache_root

        partial = default_cache_root() / PARTIAL
        found = sorted(p for p in partial.glob("*/checkpoint.pt") if p.stat().st_mtime >= since - 1)
    except Exception:  # the note is a courtesy: never hide the failure behind another
        return ""
    if not found:
        return ""
    return ("; the unfinished training's resumable checkpoint" + ("s" if len(found) > 1 else "") + ": "
            + ", ".join(map(str, found)) + " (the same command resumes from it)")


if __name__ == "__main__":
    sys.exit(main())
