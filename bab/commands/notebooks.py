"""``notebooks``: maintain notebooks/ (``bab.report.notebooks``).

    python -m bab notebooks refresh [--only 05]   re-run notebooks/ at profile smoke, in place
"""

from __future__ import annotations


def register(sub) -> None:
    _add_notebooks(sub)


def _add_notebooks(sub) -> None:
    p = sub.add_parser("notebooks", help="maintain notebooks/: refresh the stored smoke outputs")
    nb_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    refresh = nb_sub.add_parser("refresh", help="re-run notebooks/NN_*.ipynb at profile smoke from an empty run "
                                                "cache and store the outputs in place (what nbval compares)")
    from bab.report.notebooks import add_refresh_arguments

    add_refresh_arguments(refresh)
    refresh.set_defaults(run=_notebooks_refresh, errors=(ValueError,))


def _notebooks_refresh(args) -> int:
    from bab.report.notebooks import run_refresh

    return run_refresh(args)
