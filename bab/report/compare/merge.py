"""Merge the notebooks another build finished into a report folder, and rebuild its pages.

The paper record is built in pieces: each build (``report run --only NN --reports-dir /tmp/recNN``) writes a whole
report folder of its own, so two builds can run at once and each lands as soon as it ends. Merging copies a
finished run's files (its notebook and page, its run record, its rows and per-example outcomes, the stylesheet its
page links) into the record and rebuilds the record's index, results.json and RECORD.md from what it then holds:

    python -m bab report merge /tmp/rec04/paper --profile paper --only 04

Only runs whose record says "ok" are merged. A run replaces the record's run of the same name, and a seeded run
(``<stem>-seed<N>``) also the notebook's one unseeded run from before it ran at seeds (and the other way round), so no
notebook is listed twice; but never a run that finished at the same time or later (a build's folder starts as a
copy of the record, so it holds the record's older runs too). The merged files name the build's folder
``<report>``, as the record's own do. The record is changed in a copy that replaces it only when the pages were
rebuilt.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bab.core.folders import swap_into_place
from bab.report.pages.notebook_pages import linked_stylesheets
from bab.report.results.contract import read_json
from bab.report.results.seeds import split_seed_stem


def finished_runs(source: Path, only=None) -> tuple[list[str], list[str]]:
    """The run names (``runs/<name>.json``) in ``source`` whose notebook number is in ``only`` (two-digit prefixes;
    None: every one): (those that ended "ok", those that did not)."""
    ok, not_ok = [], []
    for path in sorted((source / "runs").glob("*.json")):
        if only is not None and path.stem[:2] not in only:
            continue
        record = read_json(path)
        (ok if isinstance(record, dict) and record.get("status") == "ok" else not_ok).append(path.stem)
    return ok, not_ok


def _files_of(folder: Path, name: str) -> list[Path]:
    """A run's files in a report folder: notebook, page, run record, rows and outcomes."""
    return [p for pattern in (f"{name}.ipynb", f"{name}.html", f"runs/{name}.json", f"results/{name}.*")
            for p in folder.glob(pattern)]


def _replaced_by(target: Path, name: str) -> list[str]:
    """The runs in ``target`` that run ``name`` replaces: its own name, and the same notebook's run(s) of the other
    kind (unseeded for a seeded one, every seeded one for an unseeded one)."""
    notebook, seed = split_seed_stem(name)
    replaced = [name]
    for path in (target / "runs").glob("*.json"):
        other_notebook, other_seed = split_seed_stem(path.stem)
        if other_notebook == notebook and (other_seed is None) != (seed is None):
            replaced.append(path.stem)
    return replaced


def _finished_at(folder: Path, name: str) -> str:
    """When run ``name`` in ``folder`` finished (an ISO time, so the strings sort in time order; "" if unknown)."""
    record = read_json(folder / "runs" / f"{name}.json")
    return str(record.get("finished_at") or "") if isinstance(record, dict) else ""


def newer_runs(source: Path, target: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """``names`` (runs in ``source``) split into (those newer than every run they replace in ``target``, the others).
    A run whose time is unknown, or that replaces nothing, counts as newer."""
    newer, older = [], []
    for name in names:
        finished = _finished_at(source, name)
        # a run the target lacks has no time (""), which is never as new as a known one
        if finished and any(_finished_at(target, other) >= finished for other in _replaced_by(target, name)):
            older.append(name)
        else:
            newer.append(name)
    return newer, older


def runs_to_merge(source: Path, target: Path, only=None) -> tuple[list[str], list[str]]:
    """The runs ``source`` finished that are newer than ``target``'s (``only``: a list of two-digit notebook
    prefixes), and those left out because ``target`` holds a run of theirs as new or newer; a FileNotFoundError or
    ValueError when the two folders are not reports of one profile or nothing new finished to merge."""
    for folder in (source, target):
        if read_json(folder / "results.json") is None or not (folder / "runs").is_dir():
            raise FileNotFoundError(f"{folder} holds no results.json and runs/: give report folders, e.g. "
                                    f"report merge /tmp/rec04/paper into reports/paper")
    profiles = {folder: read_json(folder / "results.json").get("profile") for folder in (source, target)}
    if profiles[source] != profiles[target]:
        raise ValueError(f"{source} is a report at profile {profiles[source]!r} and {target} one at "
                         f"{profiles[target]!r}: merge only reports of the same profile")
    names, unfinished = finished_runs(source, only)
    if not names:
        chosen = "" if only is None else f" among notebooks {', '.join(only)}"
        raise ValueError(f"no run in {source} ended ok{chosen}" + (
            f" ({', '.join(unfinished)} did not)" if unfinished else "") + ": nothing to merge")
    names, older = newer_runs(source, target, names)
    if not names:
        raise ValueError(f"{target} already holds runs as new as {', '.join(older)} (or newer): nothing to merge")
    return names, older


def merge_report(source, target, only=None, notebooks_dir="notebooks") -> tuple[list[str], list[str]]:
    """Copy the runs ``source`` finished (``only``: a list of two-digit notebook prefixes) into ``target`` and rebuild
    ``target``'s pages (``bab.report.runner.build.rebuild_pages``). Returns (the merged run names, those left out
    because ``target`` holds a run of theirs as new or newer); refused as ``runs_to_merge`` says."""
    from bab.report.runner.build import rebuild_pages, scrub_machine_paths

    source, target = Path(source).resolve(), Path(target).resolve()
    names, older = runs_to_merge(source, target, only)
    staging = target.with_name(f".merging-{target.name}")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(target, staging)
    try:
        for name in names:
            for replaced in _replaced_by(staging, name):
                for path in _files_of(staging, replaced):
                    path.unlink()
            for path in _files_of(source, name):
                destination = staging / path.relative_to(source)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)
            page = source / f"{name}.html"
            for stylesheet in linked_stylesheets(page) if page.is_file() else ():
                if (source / stylesheet).is_file():
                    shutil.copy2(source / stylesheet, staging / stylesheet)
        scrub_machine_paths(staging, Path(notebooks_dir).resolve().parent, report=source)
        rebuild_pages(staging, notebooks_dir)
        swap_into_place(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return names, older
