"""What ``python -m bab report`` refuses before any work (``BadInput``: one line, exit code 2): for each subcommand
the folders and files it reads, for a build the profile, --only, --seeds, --jobs, --threads, --precision and
--device. So an error a subcommand raises once it works is a failure with its traceback, never bad input."""

from __future__ import annotations

from pathlib import Path

from bab.core.errors import BadInput, checking


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


def check_report_folder(folder: Path, advice: str, needs_runs: bool = True) -> None:
    """A report folder holds a readable results.json (and runs/, unless only its RECORD.md is rewritten)."""
    from bab.report.results.contract import read_json

    if read_json(folder / "results.json") is None:
        raise BadInput(f"{folder} holds no results.json: {advice}")
    if needs_runs and not (folder / "runs").is_dir():
        raise BadInput(f"{folder} holds no runs/: {advice}")


def check_timings(reports: Path, profile: str) -> None:
    if not any(reports.glob("[0-9][0-9]_*.ipynb")):
        raise BadInput(f"{reports} holds no executed notebook (NN_*.ipynb); build the report first (python -m bab "
                       f"report run --profile {profile})")


def check_plan(reports: Path, profile: str) -> None:
    """What ``bab.report.runner.schedule.save_plan`` refuses: no runs, or a run that did not end ok."""
    from bab.report.runner.schedule import finished_records

    with checking():
        finished_records(reports.parent, profile)


def check_merge(source: Path, target: Path, only) -> None:
    """What ``bab.report.compare.merge.merge_report`` refuses: not two report folders, two profiles, nothing new."""
    from bab.report.compare.merge import runs_to_merge

    with checking():
        runs_to_merge(source, target, only)


def compare_verdicts(before: Path, folder: Path) -> str:
    """``bab.report.compare.verdict_changes`` of ``folder``'s results.json against the results.json ``before`` (or
    the one in the report folder ``before``); a ``BadInput`` naming the one that is missing or unreadable."""
    from bab.report.compare.verdict_changes import changes_markdown, verdict_changes
    from bab.report.results.contract import read_json

    if before.is_dir():
        before = before / "results.json"
    old, new = (read_json(path) for path in (before, folder / "results.json"))
    for path, results in ((before, old), (folder / "results.json", new)):
        if results is None:
            raise BadInput(f"no readable results.json at {path}: build the report first, or give the file an "
                           f"earlier report wrote")
    return changes_markdown(verdict_changes(old, new))


def compare_rows(before: Path, folder: Path) -> str:
    """``bab.report.compare.row_changes`` of ``folder``'s rows against those of the report folder ``before``."""
    from bab.report.compare.row_changes import changes_summary, row_changes
    from bab.report.compare.verdict_changes import markdown_table

    for built in (before, folder):
        if not any((built / "results").glob("*.json")):
            raise BadInput(f"{built} holds no results/*.json: give a built report folder (reports/<profile>, after "
                           f"./run_all.sh or python -m bab report run)")
    table = row_changes(before, folder)
    return f"{markdown_table(table)}\n\n{changes_summary(table)}"


def refuse_lanes_folder(folder: Path, doing: str) -> None:
    """A record built lane by lane (its ``lanes/``) is written by ``python -m bab record`` alone: a report run would
    replace it whole, and its pages show its lanes."""
    if (folder / "lanes").is_dir():
        raise BadInput(f"{folder} is the record built lane by lane: `{doing}` would not keep its lanes; use python -m "
                       f"bab record next (or record pages), or pass another --reports-dir")


def check_build(args) -> None:
    """What ``bab.report.runner.build.build_report`` checks before it runs a notebook, here, so that an error it
    raises once the notebooks run is a failure and not bad input."""
    from bab.core.device import default_device, training_device
    from bab.core.precision import check_precision, default_precision
    from bab.core.provenance import git_commit
    from bab.experiments.study import refuse_uncommitted_training
    from bab.report.runner.build import check_profile, discover_notebooks, notebook_runs, select_notebooks
    from bab.report.runner.schedule import check_jobs, check_threads

    with checking():
        check_profile(args.profile)
        refuse_lanes_folder(Path(args.reports_dir) / args.profile, "report run")
        seeds = seed_list(args.seeds)
        notebooks_dir = Path(args.notebooks_dir).resolve()
        refuse_uncommitted_training(args.profile, git_commit(notebooks_dir.parent), doing="run the report")
        check_jobs(args.jobs)
        check_threads(args.threads)
        check_precision(default_precision() if args.precision is None else args.precision, "precision")
        training_device(default_device() if args.device is None else args.device)
        notebook_runs(select_notebooks(discover_notebooks(notebooks_dir), args.only), args.profile, seeds)
