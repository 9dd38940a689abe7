"""``cache``: what the run cache holds, and removing some of it (``bab.core.cache_folder``).

    python -m bab cache [--older-than 30] [--prefix fit-] [--partial] [--remove]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bab.commands.common import DefaultsFormatter
from bab.core.errors import BadInput


def register(sub) -> None:
    _add_cache(sub)


def _add_cache(sub) -> None:
    p = sub.add_parser("cache", help="list the run cache (runs, measurements, converted models, unfinished "
                                     "checkpoints) and remove some of it", formatter_class=DefaultsFormatter,
                       description="Lists what the run cache holds with sizes and ages. With --older-than, --prefix "
                                   "and / or --partial it lists what they select; --remove deletes it. A lock or "
                                   "checkpoint a running training holds is never selected.")
    p.add_argument("--root", default=None, help="the cache folder (default: $BAB_CACHE_DIR, else bab's default)")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help="runs, measurements and converted models not changed for more than DAYS days")
    p.add_argument("--prefix", default=None,
                   help="runs, measurements and converted models whose name starts with this (e.g. dense-)")
    p.add_argument("--partial", action="store_true", help="unfinished runs' checkpoints and free lock files")
    p.add_argument("--remove", action="store_true", help="delete what the options above select")
    p.set_defaults(run=_cache)


def _cache(args) -> int:
    from bab.core import cache_folder
    from bab.core.runs import default_cache_root

    root = Path(args.root) if args.root else default_cache_root()
    selecting = args.older_than is not None or args.prefix is not None or args.partial
    if args.remove and not selecting:
        raise BadInput("--remove needs --older-than DAYS, --prefix NAME and / or --partial to say what to remove")
    if root.exists() and not root.is_dir():
        raise BadInput(f"--root {root} is a file; give the run cache's folder")
    found = cache_folder.entries(root)
    shown = cache_folder.select(found, args.older_than, args.prefix, args.partial) if selecting else found
    if shown:
        table = pd.DataFrame([{"kind": e["kind"], "name": e["name"], "size": cache_folder.human(e["bytes"]),
                               "age (days)": f"{e['age_days']:.1f}"} for e in shown])
        with pd.option_context("display.max_rows", None, "display.max_colwidth", 80, "display.width", 200):
            print(table.to_string(index=False))
    total = cache_folder.human(sum(e["bytes"] for e in shown))
    what = "selected" if selecting else "in all"
    print(f"{root}: {len(shown)} entries {what}, {total}" + ("" if shown or selecting else " (empty)"))
    if args.remove:
        freed = cache_folder.remove(shown)
        print(f"removed {len(shown)} entries, {cache_folder.human(freed)} freed")
    elif selecting and shown:
        print("add --remove to delete them")
    return 0
