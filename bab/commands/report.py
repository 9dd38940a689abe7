"""``report``: run the notebooks into reports/<profile>/, or, running nothing, work on a report folder.

    python -m bab report run --profile smoke|quick|record|paper [--only 01,03] [--seeds 7,13]
    python -m bab report pages reports/paper [--record-only]
    python -m bab report merge /tmp/rec04/paper --profile paper --only 04
    python -m bab report timings --profile quick [--save-plan]
    python -m bab report compare --profile paper --verdicts before.json
    python -m bab report compare --profile quick --rows /tmp/float32/reports/quick

``python -m bab report --profile quick`` (no subcommand) is ``report run``. The flags that chose a mode before the
subcommands (``--pages-only``, ``--merge`` ...) still work for one release: ``legacy_report`` says the new spelling.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bab.commands.common import program_name
from bab.commands.report_checks import (
    check_build,
    check_merge,
    check_plan,
    check_report_folder,
    check_timings,
    compare_rows,
    compare_verdicts,
    only_prefixes,
    refuse_lanes_folder,
    seed_list,
)
from bab.commands.report_legacy import LEGACY_MODES, add_legacy_arguments, new_spelling
from bab.core.errors import BadInput
from bab.experiments.profiles import PROFILE_NAMES as PROFILES
from bab.report.runner.schedule import default_jobs


def register(sub) -> None:
    p = sub.add_parser("report", help="run the notebooks at a profile and build reports/<profile>/index.html, or "
                                      "work on a built report folder (pages, merge, timings, compare)")
    add_build_arguments(p)
    add_legacy_arguments(p)
    p.set_defaults(run=legacy_report)
    actions = p.add_subparsers(dest="action", metavar="ACTION")

    build = actions.add_parser("run", help="run the notebooks at a profile into reports/<profile>/ (the default)")
    add_build_arguments(build)
    build.set_defaults(run=run_build)

    pages = actions.add_parser("pages", help="run nothing: rebuild FOLDER's index.html, results.json and RECORD.md "
                                             "from its results/ and runs/ with this checkout's report code")
    pages.add_argument("folder", metavar="FOLDER", help="a report folder, e.g. reports/paper")
    pages.add_argument("--record-only", action="store_true", help="rewrite only FOLDER/RECORD.md")
    pages.add_argument("--notebooks-dir", default="notebooks")
    pages.set_defaults(run=run_pages)

    merge = actions.add_parser("merge", help="run nothing: copy the runs that ended ok in FOLDER, another build's "
                                             "report folder, into reports/<profile>/ and rebuild its pages")
    merge.add_argument("folder", metavar="FOLDER", help="another build's report folder, e.g. /tmp/rec04/paper")
    _add_folder_arguments(merge)
    merge.add_argument("--only", default=None, help="comma-separated two-digit notebook prefixes to merge, e.g. 04")
    merge.add_argument("--notebooks-dir", default="notebooks")
    merge.set_defaults(run=run_merge)

    timings = actions.add_parser("timings", help="run nothing: where reports/<profile>/'s seconds went, per notebook "
                                                 "and kind of cell, and its slowest cells")
    _add_folder_arguments(timings)
    timings.add_argument("--save-plan", action="store_true",
                         help="instead, write the seconds of reports/<profile>/runs/ (a build whose notebooks all "
                              "ended ok) into reports/planned_seconds.json, committed, so that a clone with no report "
                              "of its own starts its notebooks in the order that should end soonest")
    timings.set_defaults(run=run_timings)

    compare = actions.add_parser("compare", help="run nothing: reports/<profile>/ beside an earlier build")
    _add_folder_arguments(compare)
    against = compare.add_mutually_exclusive_group(required=True)
    against.add_argument("--verdicts", default=None, metavar="RESULTS_JSON_OR_FOLDER",
                         help="each claim's verdict beside its verdict in an earlier report's results.json (e.g. git "
                              "show <commit>:reports/paper/results.json > before.json), as a Markdown table")
    against.add_argument("--rows", default=None, metavar="FOLDER",
                         help="every accuracy and perplexity paired with the same row of FOLDER, another build's "
                              "report folder, each change with its interval over the same test examples or windows")
    compare.set_defaults(run=run_compare)


def _add_folder_arguments(parser) -> None:
    parser.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)} (default: quick)")
    parser.add_argument("--reports-dir", default="reports")


def add_build_arguments(parser) -> None:
    """The options of `python -m bab report run`."""
    _add_folder_arguments(parser)
    parser.add_argument("--only", default=None, help="comma-separated two-digit notebook prefixes, e.g. 01,03")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="notebooks run at once, the cores divided among them (default: %(default)s on this "
                             "machine)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per notebook (default: the cores divided among the jobs); the run cache "
                             "keys models by thread count, so --only with --threads 1 reuses models trained by "
                             "BAB_THREADS=1 python -m bab train")
    parser.add_argument("--precision", default=None, choices=("float32", "bfloat16"),
                        help="the notebooks' training precision (default: $BAB_PRECISION, else float32): bfloat16 "
                             "autocast pays where the CPU multiplies bfloat16 natively (AVX-512 BF16, AMX; see "
                             "python -m bab bench precision) and trains slightly different models, cached apart")
    parser.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"),
                        help="where the notebooks train (default: $BAB_DEVICE, else auto: a GPU when torch sees "
                             "one); evaluations and speed benchmarks run on the CPU either way; cuda without a GPU is "
                             "refused")
    parser.add_argument("--seeds", default=None,
                        help="comma-separated seeds, e.g. 7,13: run the seeded notebooks (03-06 at paper) at only "
                             "these of their seeds, keeping the other seeds' runs, so a record can be built one seed "
                             "at a time")
    parser.add_argument("--notebooks-dir", default="notebooks")
    parser.add_argument("--no-mkl-override", dest="mkl_override", action="store_false",
                        help="the notebooks' kernels leave MKL's vendor check alone: its AVX2 kernels on an AMD CPU "
                             "(default: its AVX-512 kernels there, bab.core.blas; elsewhere nothing changes); their "
                             "models are cached apart either way")


def legacy_report(args) -> int:
    """``report`` with no subcommand: a build, or the mode an old flag names, after one line with its new spelling."""
    given = [dest for dest in LEGACY_MODES if getattr(args, dest) not in (None, False)]
    if len(given) > 1:
        flags = ", ".join("--" + dest.replace("_", "-") for dest in given)
        raise BadInput(f"{flags} each choose what report does; give one, or better its subcommand (report --help)")
    if not given:
        return run_build(args)
    spelling, handler = new_spelling(args, given[0])
    print(f"{program_name()} report: --{given[0].replace('_', '-')} is deprecated and goes in the next release; "
          f"use: {program_name()} {spelling}", file=sys.stderr)
    return globals()[handler](args)


def run_build(args) -> int:
    """Run the notebooks at ``args.profile`` into reports/<profile>/; the exit code."""
    from bab.report.runner.build import build_report

    check_build(args)
    try:
        code = build_report(args.profile, args.notebooks_dir, args.reports_dir, only=args.only, jobs=args.jobs,
                            threads=args.threads, seeds=seed_list(args.seeds), precision=args.precision,
                            device=args.device, mkl_override=args.mkl_override)
    except KeyboardInterrupt:
        print("\ninterrupted: the previous report was kept", file=sys.stderr)
        return 130
    return code if code != 0 else _cost_table_beside(Path(args.reports_dir) / args.profile)


def run_pages(args) -> int:
    """Rebuild a report folder's pages (or only its RECORD.md) from its files."""
    from bab.report.results.record import write_record
    from bab.report.runner.build import rebuild_pages

    check_report_folder(Path(args.folder), "point at a report folder (e.g. reports/paper)",
                        needs_runs=not args.record_only)
    refuse_lanes_folder(Path(args.folder), "report pages")
    written = write_record(args.folder) if args.record_only else rebuild_pages(args.folder, args.notebooks_dir)
    print(f"wrote {written}")
    return _cost_table_beside(args.folder)


def run_merge(args) -> int:
    """Merge another build's finished runs into reports/<profile>/ and rebuild its pages."""
    from bab.report.compare.merge import merge_report

    target = Path(args.reports_dir) / args.profile
    only = only_prefixes(args.only)
    check_merge(Path(args.folder).resolve(), target.resolve(), only)
    merged, older = merge_report(args.folder, target, only, args.notebooks_dir)
    print(f"merged {', '.join(merged)} into {target}; wrote {target / 'index.html'}")
    if older:
        print(f"kept the record's runs as new as or newer than {', '.join(older)}")
    return _cost_table_beside(target)


def run_timings(args) -> int:
    """Print where reports/<profile>/'s seconds went, or save them as the plan a fresh clone starts from."""
    folder = Path(args.reports_dir) / args.profile
    if args.save_plan:
        from bab.report.runner.schedule import save_plan

        check_plan(folder, args.profile)
        print(f"wrote {save_plan(args.reports_dir, args.profile)} ({args.profile})")
        return 0
    check_timings(folder, args.profile)
    print_timings(folder)
    return 0


def run_compare(args) -> int:
    """Print reports/<profile>/'s verdicts or rows beside an earlier build's."""
    folder = Path(args.reports_dir) / args.profile
    if args.rows is not None:
        print(compare_rows(Path(args.rows), folder))
    else:
        print(compare_verdicts(Path(args.verdicts), folder))
    return 0


def print_timings(folder: Path) -> None:
    """The tables of ``bab.report.runner.timings.report_timings`` for ``folder``, in seconds."""
    import pandas as pd

    from bab.report.runner.timings import report_timings

    table, slowest = report_timings(folder)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 70):
        print(f"seconds per notebook and kind of cell, {folder}; trained / measured: what its training loops and "
              f"its slow measurements clocked themselves (a cell counts whole under one kind):")
        print(table.round(0).to_string())
        print("\nthe slowest cells:")
        print(slowest.round(1).to_string(index=False))


def _cost_table_beside(folder) -> int:
    """The README beside a finished paper record shows its cost table (``bab.report.results.record``)."""
    from bab.report.results.record import write_cost_table

    if (readme := write_cost_table(folder)) is not None:
        print(f"wrote the record's cost table into {readme}")
    return 0
