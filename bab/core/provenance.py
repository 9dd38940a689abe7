"""Which code trained a model, and when: the commit of the checkout ``bab`` runs from, and a UTC timestamp."""

from __future__ import annotations

import contextlib
import datetime
import subprocess
from pathlib import Path

# the checkout this package runs from, when it runs from one (an installed wheel has no .git beside it)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def git_commit(cwd=None) -> str:
    """The commit (short hash) of the checkout at ``cwd`` (default: the one this package runs from), with "+dirty"
    when tracked files outside reports/ differ from it (the code that ran is then not the commit's); "unknown"
    outside a git checkout, and for an installed package even when its folder sits inside someone's repository."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd or PACKAGE_ROOT, capture_output=True, text=True, timeout=5)

    with contextlib.suppress(Exception):
        if cwd is None and Path(git("rev-parse", "--show-toplevel").stdout.strip() or "/nonexistent").resolve() \
                != PACKAGE_ROOT:
            return "unknown"
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode == 0:
            # reports/ is left out: a committed report folder changes with every run, not the code
            changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)reports")
            dirty = changed.returncode == 0 and changed.stdout.strip()
            return head.stdout.strip() + ("+dirty" if dirty else "")
    return "unknown"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
