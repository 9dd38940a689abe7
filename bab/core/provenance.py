"""Which code trained a model or wrote a result, and when: the commit of the checkout ``bab`` runs from, the digests
of the ``bab`` modules a process loaded, and a UTC timestamp."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import subprocess
import sys
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


def file_digest(path) -> str:
    """SHA-256 (first 16 hex digits) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def loaded_code_digests() -> dict[str, str]:
    """{path relative to the checkout, e.g. "bab/heads/gates.py": file_digest} of every ``bab`` module this process
    has imported: the package code a notebook's numbers can depend on. A record compares it with the checkout it
    is read in (``changed_code``) to tell which results predate a change to that code."""
    package = PACKAGE_ROOT / "bab"
    digests = {}
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if not source:
            continue
        path = Path(source).resolve()
        if path.suffix == ".py" and path.is_relative_to(package):
            digests[path.relative_to(PACKAGE_ROOT).as_posix()] = file_digest(path)
    return dict(sorted(digests.items()))


def changed_code(recorded: dict[str, str], root=PACKAGE_ROOT) -> list[str]:
    """The files of ``recorded`` ({relative path: file_digest}, from ``loaded_code_digests``) whose content under
    ``root`` differs now, or that are gone, sorted."""
    root = Path(root)
    return sorted(path for path, digest in recorded.items()
                  if not (root / path).is_file() or file_digest(root / path) != digest)
