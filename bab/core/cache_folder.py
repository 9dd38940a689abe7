"""What the run cache holds, and removing some of it: ``python -m bab cache``.

The cache root (``bab.core.runs.default_cache_root``) holds one folder per finished run (``<name>-<key>/``: the
model, its metrics and config), the stored measurements (``measurements/*.json``) and the unfinished runs'
resumable checkpoints (``partial/<run>/checkpoint.pt``) with their lock files (``partial/<run>.lock``), and
downloaded models converted once for faster loading (``converted/<name>/``, bab.context.gguf_copy). A lock file
is free once the process that held it has ended (the system releases an ``flock`` however the process ends).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from bab.core.runs import CONVERTED, MEASUREMENTS, PARTIAL

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; every lock file counts as free
    fcntl = None

KINDS = ("run", "measurement", "converted", "partial", "lock")


def entries(root: Path) -> list[dict]:
    """One dict per thing in the cache: ``path``, ``kind`` (``KINDS``), ``name``, ``bytes`` and ``age_days`` (since
    its newest file changed), finished runs first, each kind by name."""
    root = Path(root)
    found = []
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        if path.is_dir() and path.name not in (MEASUREMENTS, PARTIAL, CONVERTED) and not path.name.startswith("."):
            found.append(_entry(path, "run"))
    for path in sorted((root / MEASUREMENTS).glob("*.json")):
        found.append(_entry(path, "measurement"))
    for path in sorted((root / CONVERTED).glob("[!.]*")):
        if path.is_dir():
            found.append(_entry(path, "converted"))
    for path in sorted((root / PARTIAL).iterdir()) if (root / PARTIAL).is_dir() else []:
        if path.is_dir():
            found.append(_entry(path, "partial"))
        elif path.suffix == ".lock":
            found.append({**_entry(path, "lock"), "held": lock_held(path)})
    return found


def _entry(path: Path, kind: str) -> dict:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    newest = max((p.stat().st_mtime for p in files), default=path.stat().st_mtime)
    return {"path": path, "kind": kind, "name": path.name, "bytes": sum(p.stat().st_size for p in files),
            "age_days": (time.time() - newest) / 86400}


def lock_held(path: Path) -> bool:
    """Whether a process holds the training lock ``path`` now."""
    if fcntl is None:
        return False
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def select(found: list[dict], older_than_days: float | None = None, prefix: str | None = None,
           partial: bool = False) -> list[dict]:
    """The entries to remove: runs, measurements and converted models older than ``older_than_days`` and / or
    whose name starts with ``prefix`` (both when both are given), and with ``partial`` every unfinished run's
    checkpoint and free lock. A lock a live process holds, and the checkpoint of its run, are never chosen."""
    if older_than_days is None and prefix is None and not partial:
        raise ValueError("say what to remove: --older-than DAYS, --prefix NAME and / or --partial")
    if older_than_days is not None and older_than_days < 0:
        raise ValueError(f"--older-than must be a number of days >= 0, got {older_than_days}")
    held = {e["name"].removesuffix(".lock") for e in found if e["kind"] == "lock" and e["held"]}
    chosen = []
    for e in found:
        if e["kind"] in ("run", "measurement", "converted"):
            if (older_than_days is not None or prefix is not None) and \
                    (older_than_days is None or e["age_days"] > older_than_days) and \
                    (prefix is None or e["name"].startswith(prefix)):
                chosen.append(e)
        elif partial and e["name"].removesuffix(".lock") not in held:
            chosen.append(e)
    return chosen


def remove(chosen: list[dict]) -> int:
    """Delete the chosen entries; the bytes freed."""
    freed = 0
    for e in chosen:
        with contextlib.suppress(FileNotFoundError):
            if e["path"].is_dir():
                shutil.rmtree(e["path"])
            else:
                os.unlink(e["path"])
            freed += e["bytes"]
    return freed


def human(size: float) -> str:
    """Bytes as '12.3 MB'."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
