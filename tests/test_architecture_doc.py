"""docs/architecture.md names every module of bab: its layout tree lists each file under its folder (or the folder's
line says what it holds), so a module added, moved or renamed without the doc fails here."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
DESCRIPTION_COLUMN = 20  # a line indented this far continues the description of the entry above it


def layout_tree(text: str) -> list[str]:
    """The lines of the doc's first code block that starts with ``bab/``."""
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        if block.startswith("bab/"):
            return block.splitlines()
    raise AssertionError("docs/architecture.md has no layout tree starting with bab/")


def named_paths(tree: list[str]) -> set[str]:
    """Every folder and .py file the tree names, as paths from the repository root: entries by their indentation
    under their folder, and files a folder's description names (``registry.py``, ``verdicts.py + evidence.py``)."""
    named, stack, owner = set(), [], "bab/"
    for line in tree[1:]:
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent == 0:
            continue  # a top-level folder beside bab/ (notebooks/, tests/, docs/)
        if indent < DESCRIPTION_COLUMN:
            first = re.match(r"(?:[\w.]+/?,\s*)*[\w.]+/?", line.strip())[0]
            rest = line.strip()[len(first):]
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else "bab/"
            for entry in re.split(r",\s*", first):
                if entry.endswith("/"):
                    stack.append((indent, parent + entry))
                    named.add(parent + entry)
                elif entry.endswith(".py"):
                    named.add(parent + entry)
            owner = stack[-1][1] if first.endswith("/") else parent
        else:
            rest = line
        named.update(owner + name for name in re.findall(r"\b(\w+\.py)\b", rest))
    return named


def test_the_tree_reader_follows_folders_and_descriptions():
    tree = ["bab/",
            "  core/                  shared",
            "    runs.py              the run cache",
            "  report/                by job",
            "    claims/              rules, registry.py (the rules), verdicts.py + evidence.py",
            "                         and counts.py",
            "    pages/               rendering",
            "      index.py, template.html   the front page",
            "  __main__.py            the CLI"]
    assert named_paths(tree) == {
        "bab/core/", "bab/core/runs.py", "bab/report/", "bab/report/claims/", "bab/report/claims/registry.py",
        "bab/report/claims/verdicts.py", "bab/report/claims/evidence.py", "bab/report/claims/counts.py",
        "bab/report/pages/", "bab/report/pages/index.py", "bab/__main__.py"}


MODULES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bab").rglob("*.py"))
NAMED = named_paths(layout_tree(DOC.read_text(encoding="utf-8")))


@pytest.mark.parametrize("module", MODULES)
def test_every_module_is_named_in_the_architecture_doc(module):
    # a package is named by its folder; a module by its file under that folder
    wanted = module[: -len("__init__.py")] if module.endswith("/__init__.py") and module != "bab/__init__.py" \
        else module
    assert wanted in NAMED, f"docs/architecture.md's layout tree does not name {wanted}: add it under its folder"
