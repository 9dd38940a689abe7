"""Imports flow one way: core -> data -> {heads, context, sparsifiner} -> experiments -> report -> CLI commands ->
the CLI's entry point.

Two rules beside the layers: the public API (``bab.api``) runs the methods' pipelines (``bab.experiments.pipelines``)
and imports no notebook's folder (``bab.experiments.<notebook>``: profiles sized for a notebook, its rows, its
analyses); and neither ``core`` nor the ``Study`` base (``bab.experiments.study``) imports a method package, so each
method's code (its versions included) stays in its own room.

Every import in bab is read from the source (function-level imports included, since a lazy import
is still a dependency) and checked against the layers; the three method rooms never import each
other, and no module imports itself back through a cycle. The checker is tested on hand-made
graphs first, so a broken checker cannot pass silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BAB = Path(__file__).resolve().parents[1] / "bab"

# room -> layer; rooms in one layer may not import each other (the three methods are independent)
LAYERS = {
    "core": 0,
    "data": 1,
    "heads": 2, "context": 2, "sparsifiner": 2,
    "experiments": 3,
    "report": 4, "api": 4,  # the public API chains the methods' steps; report and api never import each other
    "commands": 5,  # the CLI's commands, one module each
    "__main__": 6, "__init__": 6,  # the CLI's entry point and the package's public face may use everything
}


def module_name(path: Path, root: Path = BAB) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 2:
        parts = parts[:-1]
    return ".".join(parts)


def room(module: str) -> str:
    """bab.heads.train -> heads; bab.__main__ -> __main__; bab -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path, modules: set[str], root: Path = BAB) -> set[str]:
    """The bab modules ``path`` imports anywhere in its body, resolved to module names in ``modules``."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from bab.heads import plots` imports the module bab.heads.plots
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # bab.heads.train.TrainConfig -> bab.heads.train
                target = target.rpartition(".")[0]
            if target and target != here:
                found.add(target)
    return found


def import_graph(root: Path = BAB) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imports_of(p, modules, root) for p in paths}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        for target in targets:
            a, b = room(source), room(target)
            if b == "__init__" and target == "bab":
                bad.append(f"{source} imports the package bab itself; import the module that defines the name")
            elif LAYERS[b] > LAYERS[a]:
                bad.append(f"{source} ({a}, layer {LAYERS[a]}) imports {target} ({b}, layer {LAYERS[b]})")
            elif LAYERS[b] == LAYERS[a] and a != b:
                bad.append(f"{source} imports {target}: the rooms {a} and {b} are independent")
    return sorted(bad)


METHODS = ("heads", "context", "sparsifiner")
SHARED_EXPERIMENTS = ("pipelines", "study", "methods", "registry", "profiles", "steps")  # not a notebook's folder


def notebook_folder(module: str) -> str | None:
    """bab.experiments.vit.study -> "vit"; None for the pipelines and the modules every notebook shares."""
    parts = module.split(".")
    if room(module) != "experiments" or len(parts) < 3 or parts[2] in SHARED_EXPERIMENTS:
        return None
    return parts[2]


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports the layers allow but the rooms forbid: api -> a notebook's folder, core or the Study base -> a method."""
    bad = []
    for source, targets in graph.items():
        for target in targets:
            if room(source) == "api" and notebook_folder(target):
                bad.append(f"{source} (api) imports {target}: notebook {notebook_folder(target)!r}'s code")
            elif (room(source) == "core" or source == "bab.experiments.study") and room(target) in METHODS:
                bad.append(f"{source} imports the method package {target}: a method's code stays in its room")
    return sorted(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# ----------------------------------------------------------------------------- the checker itself


def test_checker_reads_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "bab"
    (pkg / "core").mkdir(parents=True)
    (pkg / "heads").mkdir()
    for f in ("__init__.py", "core/__init__.py", "heads/__init__.py", "core/budget.py"):
        (pkg / f).write_text("")
    (pkg / "heads" / "plots.py").write_text("")
    (pkg / "core" / "timing.py").write_text("def f():\n    from bab.heads import plots\n")
    (pkg / "heads" / "train.py").write_text("from ..core.budget import x\nimport bab.core.timing\n")
    graph = import_graph(pkg)
    assert graph["bab.core.timing"] == {"bab.heads.plots"}
    assert graph["bab.heads.train"] == {"bab.core.budget", "bab.core.timing"}
    assert layer_violations(graph) == ["bab.core.timing (core, layer 0) imports bab.heads.plots (heads, layer 2)"]


def test_checker_flags_sibling_rooms_and_cycles():
    graph = {"bab.heads.a": {"bab.context.b"}, "bab.context.b": set(),
             "bab.experiments.x": {"bab.experiments.y"}, "bab.experiments.y": {"bab.experiments.x"}}
    assert layer_violations(graph) == ["bab.heads.a imports bab.context.b: the rooms heads and context are independent"]
    assert cycles(graph) == [["bab.experiments.x", "bab.experiments.y"]]


def test_checker_flags_api_importing_notebooks_and_shared_code_importing_methods():
    graph = {"bab.api.vit": {"bab.experiments.vit.profiles", "bab.experiments.pipelines.vit", "bab.experiments.study"},
             "bab.core.runs": {"bab.heads"}, "bab.experiments.study": {"bab.context.train", "bab.core.runs"},
             "bab.experiments.pipelines.heads": {"bab.heads.train"}, "bab.experiments.vit.study": {"bab.sparsifiner"}}
    assert room_violations(graph) == [
        "bab.api.vit (api) imports bab.experiments.vit.profiles: notebook 'vit''s code",
        "bab.core.runs imports the method package bab.heads: a method's code stays in its room",
        "bab.experiments.study imports the method package bab.context.train: a method's code stays in its room"]


# ----------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_every_room_is_known(graph):
    assert {room(m) for m in graph} <= set(LAYERS), "a new room under bab/ needs a layer in LAYERS"
    assert {"core", "data", "heads", "context", "sparsifiner", "experiments", "report"} <= {room(m) for m in graph}


def test_imports_flow_one_way(graph):
    assert layer_violations(graph) == []


def test_api_imports_no_notebook_and_shared_code_no_method(graph):
    assert room_violations(graph) == []


def test_no_import_cycles(graph):
    assert cycles(graph) == []
