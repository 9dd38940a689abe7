"""``notebooks``: maintain notebooks/ (``bab.report.runner.notebooks``).

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
    from bab.report.runner.notebooks import add_refresh_arguments

    add_refresh_arguments(refresh)
    refresh.set_defaults(run=_notebooks_refresh)


def _notebooks_refresh(args) -> int:
    from pathlib import Path

    from bab.core.errors import checking
    from bab.report.runner.build import discover_notebooks, select_notebooks
    from bab.report.runner.notebooks import prepare_pairs, run_refresh

    # --notebooks-dir, --only and each notebook against its paired .py, before a kernel starts; a newer .py is synced
    # into its notebook here (refresh does it again, a no-op by then)
    with checking():
        prepare_pairs(select_notebooks(discover_notebooks(Path(args.notebooks_dir)), args.only))
    return run_refresh(args)
