"""``report``: run the notebooks at a profile into reports/<profile>/ (``bab.report.build``), or, running nothing,
rebuild a report folder's pages, merge another build's finished notebooks into it, show where its seconds went or
how its verdicts moved since an earlier report.

    python -m bab report --profile smoke|quick|paper [--only 01,03] [--seeds 7,13]
    python -m bab report --pages-only reports/paper
    python -m bab report --profile paper --merge /tmp/rec04/paper --only 04
    python -m bab report --profile quick --timings
    python -m bab report --profile quick --save-plan
    python -m bab report --profile paper --verdicts-against before.json
    python -m bab report --profile quick --rows-against /tmp/float32/reports/quick
"""

from __future__ import annotations

import sys
from pathlib import Path

from bab.core.errors import BadInput, checking
from bab.experiments.profiles import PROFILE_NAMES as PROFILES
from bab.report.schedule import default_jobs


def register(sub) -> None:
    p = sub.add_parser("report", help="run the notebooks at a profile and build reports/<profile>/index.html")
    add_arguments(p)
    p.set_defaults(run=run)


def add_arguments(parser):
    """The options of `python -m bab report`."""
    parser.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)} (default: quick)")
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
    parser.add_argument("--reports-dir", default="reports")
    parser.add_argument("--notebooks-dir", default="notebooks")
    parser.add_argument("--record-only", default=None, metavar="FOLDER",
                        help="run nothing: rewrite FOLDER/RECORD.md from its results.json and runs/ (e.g. "
                             "reports/paper)")
    parser.add_argument("--timings", action="store_true",
                        help="run nothing: print where reports/<profile>/'s seconds went, per notebook and kind of "
                             "cell (training, benchmark, evaluation, figures, imports, kernel start) and its slowest "
                             "cells")
    parser.add_argument("--save-plan", action="store_true",
                        help="run nothing: write the seconds of reports/<profile>/runs/ (a build whose notebooks all "
                             "ended ok) into reports/planned_seconds.json, committed, so that a clone with no report "
                             "of its own starts its notebooks in the order that should end soonest")
    parser.add_argument("--pages-only", default=None, metavar="FOLDER",
                        help="run nothing: rebuild FOLDER's index.html, results.json and RECORD.md from its "
                             "results/ and runs/ with this checkout's report code (claims, front page)")
    parser.add_argument("--merge", default=None, metavar="FOLDER",
                        help="run nothing: copy the runs that ended ok in FOLDER, another build's report folder "
                             "(e.g. /tmp/rec04/paper; --only to choose notebooks), into reports/<profile>/ and "
                             "rebuild its pages")
    parser.add_argument("--verdicts-against", default=None, metavar="RESULTS_JSON_OR_FOLDER",
                        help="run nothing: print each claim of reports/<profile>/results.json beside its verdict "
                             "in RESULTS_JSON, an earlier report's (e.g. git show <commit>:reports/paper/"
                             "results.json > before.json) or the results.json in an earlier report folder, as a "
                             "Markdown table")
    parser.add_argument("--rows-against", default=None, metavar="FOLDER",
                        help="run nothing: pair every accuracy and perplexity of reports/<profile>/ with the same "
                             "row of FOLDER, another build's report folder (e.g. one trained in float32), and print "
                             "each change with its interval over the same test examples or windows")
    parser.add_argument("--no-mkl-override", dest="mkl_override", action="store_false",
                        help="the notebooks' kernels leave MKL's vendor check alone: its AVX2 kernels on an AMD CPU "
                             "(default: its AVX-512 kernels there, bab.core.blas; elsewhere nothing changes); their "
                             "models are cached apart either way")


def print_timings(folder: Path) -> None:
    """The tables of ``bab.report.timings.report_timings`` for ``folder``, in seconds."""
    import pandas as pd

    from bab.report.timings import report_timings

    table, slowest = report_timings(folder)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 70):
        print(f"seconds per notebook and kind of cell, {folder}; trained / measured: what its training loops and "
              f"its slow measurements clocked themselves (a cell counts whole under one kind):")
        print(table.round(0).to_string())
        print("\nthe slowest cells:")
        print(slowest.round(1).to_string(index=False))


def read_verdicts(before: Path, folder: Path) -> dict[Path, dict]:
    """The results.json of ``before`` (a file, or the report folder holding one) and of ``folder``, by path; a
    ``BadInput`` naming the one that is missing or unreadable."""
    from bab.report.results import read_json

    if before.is_dir():
        before = before / "results.json"
    found = {path: read_json(path) for path in (before, folder / "results.json")}
    for path, results in found.items():
        if results is None:
            raise BadInput(f"no readable results.json at {path}: build the report first, or give the file an "
                           f"earlier report wrote")
    return found


def compare_verdicts(before: Path, folder: Path) -> str:
    """``bab.report.verdict_changes`` of ``folder``'s results.json against the results.json ``before`` (or the one in
    the report folder ``before``)."""
    from bab.report.verdict_changes import changes_markdown, verdict_changes

    found = read_verdicts(before, folder)
    old, new = found.values()
    return changes_markdown(verdict_changes(old, new))


def compare_rows(before: Path, folder: Path) -> str:
    """``bab.report.row_changes`` of ``folder``'s rows against those of the report folder ``before``."""
    from bab.report.row_changes import changes_summary, row_changes
    from bab.report.verdict_changes import markdown_table

    table = row_changes(before, folder)
    return f"{markdown_table(table)}\n\n{changes_summary(table)}"


def only_prefixes(only: str | None) -> list[str] | None:
    """--only as a list of two-digit notebook prefixes ("01,03" -> ["01", "03"]), None when not given."""
    if only is None:
        return None
    prefixes = [part.strip() for part in only.split(",") if part.strip()]
    if not prefixes or not all(len(p) == 2 and p.isdigit() for p in prefixes):
        raise BadInput(f"--only takes comma-separated two-digit notebook prefixes, e.g. 01,03; got {only!r}")
    return prefixes


def seed_list(seeds: str | None) -> list[int] | None:
    """--seeds as a list of ints ("7,13" -> [7, 13]), None when not given."""
    if seeds is None:
        return None
    parts = [part.strip() for part in seeds.split(",") if part.strip()]
    if not parts or not all(part.isdigit() for part in parts):
        raise BadInput(f"--seeds takes comma-separated whole numbers, e.g. 7,13; got {seeds!r}")
    return [int(part) for part in parts]


def check(args) -> None:
    """Refuse bad input before anything runs or is written: for each mode the folders and files it reads, for a
    build the profile, --only, --seeds, --jobs, --threads, --precision and --device (``BadInput``)."""
    from bab.report.results import read_json

    reports = Path(args.reports_dir) / args.profile
    if args.record_only is not None:
        if read_json(Path(args.record_only) / "results.json") is None:
            raise BadInput(f"{Path(args.record_only) / 'results.json'} not found: point at a report folder (e.g. "
                           f"reports/paper)")
    elif args.pages_only is not None:
        _check_report_folder(Path(args.pages_only), "point at a report folder (e.g. reports/paper)")
    elif args.timings:
        if not any(reports.glob("[0-9][0-9]_*.ipynb")):
            raise BadInput(f"{reports} holds no executed notebook (NN_*.ipynb); build the report first (python -m bab "
                           f"report --profile {args.profile})")
    elif args.save_plan:
        _check_plan(reports, args.profile)
    elif args.merge is not None:
        _check_merge(Path(args.merge).resolve(), reports.resolve(), only_prefixes(args.only))
    elif args.rows_against is not None:
        for folder in (Path(args.rows_against), reports):
            if not any((folder / "results").glob("*.json")):
                raise BadInput(f"{folder} holds no results/*.json: give a built report folder (reports/<profile>, "
                               f"after ./run_all.sh or python -m bab report)")
    elif args.verdicts_against is not None:
        read_verdicts(Path(args.verdicts_against), reports)
    else:
        _check_build(args)


def _check_report_folder(folder: Path, advice: str) -> None:
    from bab.report.results import read_json

    if read_json(folder / "results.json") is None or not (folder / "runs").is_dir():
        raise BadInput(f"{folder} holds no results.json and runs/: {advice}")


def _check_plan(reports: Path, profile: str) -> None:
    """What ``bab.report.schedule.save_plan`` refuses: no runs, or a run that did not end ok."""
    from bab.report.results import read_json

    records = {path.stem: read_json(path) for path in sorted((reports / "runs").glob("*.json"))}
    if not records:
        raise BadInput(f"no runs in {reports / 'runs'}: build the report first (python -m bab report --profile "
                       f"{profile})")
    failed = [stem for stem, r in records.items() if not isinstance(r, dict) or r.get("status") != "ok"]
    if failed:
        raise BadInput(f"not planning on a build whose runs did not all end ok ({', '.join(failed)}): rebuild them "
                       f"first (python -m bab report --profile {profile} --only ...)")


def _check_merge(source: Path, target: Path, only) -> None:
    """What ``bab.report.merge.merge_report`` refuses: not two report folders, two profiles, nothing to merge."""
    from bab.report.merge import finished_runs, newer_runs
    from bab.report.results import read_json

    for folder in (source, target):
        _check_report_folder(folder, "give report folders, e.g. --merge /tmp/rec04/paper into reports/paper")
    profiles = {folder: read_json(folder / "results.json").get("profile") for folder in (source, target)}
    if profiles[source] != profiles[target]:
        raise BadInput(f"{source} is a report at profile {profiles[source]!r} and {target} one at "
                       f"{profiles[target]!r}: merge only reports of the same profile")
    names, unfinished = finished_runs(source, only)
    if not names:
        chosen = "" if only is None else f" among notebooks {', '.join(only)}"
        raise BadInput(f"no run in {source} ended ok{chosen}" + (
            f" ({', '.join(unfinished)} did not)" if unfinished else "") + ": nothing to merge")
    names, older = newer_runs(source, target, names)
    if not names:
        raise BadInput(f"{target} already holds runs as new as {', '.join(older)} (or newer): nothing to merge")


def _check_build(args) -> None:
    """What ``bab.report.build.build_report`` checks before it runs a notebook, here, so that an error it raises
    once the notebooks run is a failure and not bad input."""
    from bab.core.device import default_device, training_device
    from bab.core.precision import check_precision, default_precision
    from bab.core.provenance import git_commit
    from bab.experiments.study import refuse_uncommitted_training
    from bab.report.build import check_profile, discover_notebooks, notebook_runs, select_notebooks
    from bab.report.schedule import check_jobs, check_threads

    with checking():
        check_profile(args.profile)
        seeds = seed_list(args.seeds)
        notebooks_dir = Path(args.notebooks_dir).resolve()
        refuse_uncommitted_training(args.profile, git_commit(notebooks_dir.parent), doing="run the report")
        check_jobs(args.jobs)
        check_threads(args.threads)
        check_precision(default_precision() if args.precision is None else args.precision, "precision")
        training_device(default_device() if args.device is None else args.device)
        notebook_runs(select_notebooks(discover_notebooks(notebooks_dir), args.only), args.profile, seeds)


def run(args):
    """Build the report for parsed ``args``; return the exit code."""
    from bab.report.build import build_report, rebuild_pages
    from bab.report.merge import merge_report
    from bab.report.record import write_record

    check(args)
    try:
        if args.record_only is not None:
            print(f"wrote {write_record(args.record_only)}")
            return _cost_table_beside(args.record_only)
        if args.pages_only is not None:
            print(f"wrote {rebuild_pages(args.pages_only, args.notebooks_dir)}")
            return _cost_table_beside(args.pages_only)
        if args.timings:
            print_timings(Path(args.reports_dir) / args.profile)
            return 0
        if args.save_plan:
            from bab.report.schedule import save_plan

            print(f"wrote {save_plan(args.reports_dir, args.profile)} ({args.profile})")
            return 0
        if args.merge is not None:
            target = Path(args.reports_dir) / args.profile
            merged, older = merge_report(args.merge, target, only_prefixes(args.only), args.notebooks_dir)
            print(f"merged {', '.join(merged)} into {target}; wrote {target / 'index.html'}")
            if older:
                print(f"kept the record's runs as new as or newer than {', '.join(older)}")
            return _cost_table_beside(target)
        if args.rows_against is not None:
            print(compare_rows(Path(args.rows_against), Path(args.reports_dir) / args.profile))
            return 0
        if args.verdicts_against is not None:
            print(compare_verdicts(Path(args.verdicts_against), Path(args.reports_dir) / args.profile))
            return 0
        code = build_report(args.profile, args.notebooks_dir, args.reports_dir, only=args.only, jobs=args.jobs,
                            threads=args.threads, seeds=seed_list(args.seeds),
                            precision=args.precision, device=args.device, mkl_override=args.mkl_override)
        return code if code != 0 else _cost_table_beside(Path(args.reports_dir) / args.profile)
    except KeyboardInterrupt:
        print("\ninterrupted: the previous report was kept", file=sys.stderr)
        return 130


def _cost_table_beside(folder) -> int:
    """The README beside a finished paper record shows its cost table (``bab.report.record.write_cost_table``)."""
    from bab.report.record import write_cost_table

    if (readme := write_cost_table(folder)) is not None:
        print(f"wrote the record's cost table into {readme}")
    return 0
