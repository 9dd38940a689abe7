"""``report``: run the notebooks at a profile into reports/<profile>/ (``bab.report.build``).

    python -m bab report --profile smoke|quick|paper [--only 01,03]
"""

from __future__ import annotations


def register(sub) -> None:
    _add_report(sub)


def _add_report(sub) -> None:
    from bab.report.build import add_arguments

    p = sub.add_parser("report", help="run the notebooks at a profile and build reports/<profile>/index.html")
    add_arguments(p)
    p.set_defaults(run=_report, errors=())


def _report(args) -> int:
    from bab.report.build import run

    return run(args)
