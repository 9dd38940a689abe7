"""Output folders (and files) that appear whole or not at all: built in a staging folder beside, then renamed into
place.

A run that is killed, or fails, half-way leaves its final folder as it was (absent, or the previous
one); only a complete staging folder replaces it, by renames within one parent folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path


def non_empty(folder: Path) -> list[str]:
    """The names in ``folder`` (sorted), [] when it does not exist or is empty."""
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def share(folder: Path) -> Path:
    """Give ``folder`` and everything in it the permissions of a plain file or folder under the user's umask
    (0644 / 0755 with the usual 022): safetensors writes its files 0600 and ``mkdtemp`` its folders 0700, so a model
    written for others to read would otherwise be readable by its owner alone."""
    mask = current_umask()
    folder = Path(folder)
    for root, dirs, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~mask)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
    os.chmod(folder, 0o777 & ~mask)
    return folder


def write_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` (its parent folders created) through a temporary file beside it and a rename, with
    the usual permissions: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def staging_beside(final: Path) -> Path:
    """A fresh, empty folder ``.<name>.staging-<random>`` next to ``final`` (same file system, so renames work)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.staging-", dir=final.parent))
    os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes 0700; the result is shared like any folder
    return staging


def swap_into_place(staging: Path, final: Path) -> None:
    """Move the complete staging folder to ``final``; an old ``final`` is removed only afterwards."""
    aside = None
    if final.exists():
        aside = final.with_name(f".old-{final.name}-{os.getpid()}-{time.time_ns()}")
        os.rename(final, aside)
    try:
        os.rename(staging, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
