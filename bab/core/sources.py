"""Where data and models come from: one ordered search over candidate places (``standard_places``: an explicit
path, ``$BAB_DATA_DIR``, an installed package's data folder, system folders, the hub: never probed here, "found"
when allowed, a failed download reported by the caller with ``Found.failed``), and, when none holds what a loader
needs, one ``SourceNotFoundError`` listing every place tried and how to provide the data. The order and what each
loader looks at: docs/data-and-models.md, "The resolver order".

Imports nothing else from bab.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ENV_VAR = "BAB_DATA_DIR"


class SourceNotFoundError(FileNotFoundError):
    """No candidate place holds the data or model; the message lists every place tried and the fix."""

    tried: tuple[str, ...] = ()

    @classmethod
    def listing(cls, problem: str, tried: Sequence[str], fix: str) -> SourceNotFoundError:
        """``<problem>. Tried: <place: why not>; ... . To fix: <fix>.`` (``tried`` is kept as an attribute)."""
        parts = [problem, "Tried: " + "; ".join(tried) if tried else "", f"To fix: {fix}"]
        message = ". ".join(part.rstrip(". ") for part in parts if part) + "."  # no ".." where a part ends a sentence
        error = cls(message)
        error.tried = tuple(tried)
        return error


@dataclass(frozen=True)
class Place:
    """One candidate place: a local folder to check, or a hub id to load from."""

    label: str  # how the list of what was tried names this place
    folder: Path | None = None
    hub_id: str | None = None
    skip: str | None = None  # why this place is not looked at here (variable unset, package not installed, ...)


@dataclass(frozen=True)
class Found:
    """The first place that holds what is needed (None: no place does) and what was tried before it."""

    place: Place | None
    tried: tuple[str, ...]

    @property
    def folder(self) -> Path | None:
        return self.place.folder if self.place is not None else None

    @property
    def hub_id(self) -> str | None:
        return self.place.hub_id if self.place is not None else None

    def failed(self, reason: str) -> Found:
        """The found place failed when used (a hub download, say): nothing found, the reason recorded."""
        return replace(self, place=None, tried=(*self.tried, f"{self.place.label}: {reason}"))

    def error(self, problem: str, fix: str, error_type: type[SourceNotFoundError] = SourceNotFoundError):
        return error_type.listing(problem, self.tried, fix)

    def require(self, problem: str, fix: str, error_type: type[SourceNotFoundError] = SourceNotFoundError) -> Found:
        """This result when something was found; otherwise raises ``error_type`` listing what was tried."""
        if self.place is None:
            raise self.error(problem, fix, error_type)
        return self


def find_source(places: Iterable[Place], has: Callable[[Path], bool], lacks: str | Callable[[Path], str]) -> Found:
    """The first place whose folder passes ``has`` (or the first hub place not skipped).

    ``lacks`` says what a folder that fails ``has`` is missing (a text, or a function of the folder);
    it goes into the list of what was tried, as ``<label>: <folder> lacks <lacks>``.
    """
    tried = []
    for place in places:
        if place.skip is not None:
            tried.append(f"{place.label}: {place.skip}")
        elif place.hub_id is not None:
            return Found(place, tuple(tried))
        elif has(place.folder):
            return Found(place, tuple(tried))
        elif not place.folder.exists():
            tried.append(f"{place.label}: {place.folder} does not exist")
        else:
            missing = lacks(place.folder) if callable(lacks) else lacks
            tried.append(f"{place.label}: {place.folder} lacks {missing}")
    return Found(None, tuple(tried))


# ----------------------------------------------------------------------------------------------------------------
# Candidate places


def explicit_places(path, subfolder: str | None = None) -> list[Place]:
    """A path the caller passed: the folder itself, then ``path/<subfolder>``."""
    path = Path(path).expanduser()
    return [Place("path", path)] + ([Place("path", path / subfolder)] if subfolder else [])


def data_dir_place(subfolder: str) -> Place:
    """``$BAB_DATA_DIR/<subfolder>``."""
    root = os.environ.get(ENV_VAR)
    if not root:
        return Place(ENV_VAR, skip="not set")
    return Place(f"{ENV_VAR}={root!r}", Path(root).expanduser() / subfolder)


def package_place(distribution: str, module: str, subfolder: str = "") -> Place:
    """The folder ``subfolder`` inside the installed package ``module`` (installed as ``distribution``).

    Found with ``importlib.util.find_spec``, which locates the package without running its code.
    """
    label = f"PyPI package {distribution}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a dotted name whose parent is missing, or a broken module entry
        spec = None
    if spec is None:
        return Place(label, skip="not installed")
    roots = list(spec.submodule_search_locations or []) or ([str(Path(spec.origin).parent)] if spec.origin else [])
    if not roots:
        return Place(label, skip=f"installed, but {module} has no folder on disk")
    return Place(label, Path(roots[0]).resolve() / subfolder)


def hub_offline() -> str | None:
    """The value of HF_HUB_OFFLINE when it switches the hub off (Hugging Face's own rule), else None."""
    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value if value.strip().lower() not in ("", "0", "false", "no", "off") else None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether huggingface.co answers at all; lets offline callers fail in milliseconds, not after retries."""
    if hub_offline() is not None:
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def hub_place(hub_id: str, allow_hub: bool = True) -> Place:
    """A Hugging Face hub id; skipped when the caller forbids the hub or HF_HUB_OFFLINE is set."""
    label = f"Hugging Face hub {hub_id!r}"
    if not allow_hub:
        return Place(label, skip="not tried (allow_hub=False)")
    offline = hub_offline()
    if offline is not None:
        return Place(label, skip=f"not tried (HF_HUB_OFFLINE={offline})")
    return Place(label, hub_id=hub_id)


def standard_places(path, subfolder: str, *, package: Place | None = None, system: Sequence[Place] = (),
                    hub: Place | None = None) -> list[Place]:
    """The usual order (see the module doc): only the explicit path when one is given, else the rest."""
    if path is not None:
        return explicit_places(path, subfolder)
    return [data_dir_place(subfolder), *([package] if package else []), *system, *([hub] if hub else [])]
