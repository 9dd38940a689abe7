"""One verdict system: the notebooks show the claims engine's judgement of their rows, never a verdict of their own,
and the studies build those rows (a notebook never loops over its measurements to make rows).

``bab/report/claims.py`` decides every verdict (the report's front page shows the same). A notebook that printed
"within 2 points of dense: True" with a threshold of its own could say the opposite of the claims table, so each
notebook's jupytext script is read here (not executed): no verdict phrased with its own threshold, no
"## Verdicts" section, and every notebook that saves result rows displays ``judgement_table`` of those rows.
Nor does any notebook speak of issues: its text and outputs say what the code does.
"""

import ast
import json
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))

# what a verdict with a threshold of its own reads like, in any string a code cell builds ("{}" stands for an
# f-string's placeholder); invariants ("cost monotone over 19 budgets: True", "long prompt >= 512 tokens",
# "local windows within 0.02 of the fraction they were matched to") match none of them
VERDICT_PATTERNS = {
    "a tolerance in points": r"within \S+ points? of",
    "a tolerance in percent": r"within \S+% of",
    "a tolerance judged": r"within \S+: |\|[^|]+\| <= \S+",  # the latter a column such as "|cost - b| <= 0.05"
    "a speed-up bar": r"(above|>=|at least) (the paper's )?\S+x\b",
    "a share bar": r"(>= ?|at least )\S+%(:| of)",
    "a claim's outcome": r"\b(reproduced|verdicts?)\b",
    "a claim held": r"\bholds: |at every sparsity: |at equal budget: ",
}
ISSUE = re.compile(r"\bissues?\b", re.IGNORECASE)
HEADING = re.compile(r"^#+\s*verdicts?\b", re.IGNORECASE | re.MULTILINE)


def code_strings(source: str) -> list[str]:
    """Every string a code cell's source builds: plain literals, and f-strings with "{}" for each placeholder."""
    strings, parts = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            strings.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
            parts.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            strings.append(node.value)
    return strings


def own_verdicts(text: str) -> list[str]:
    """What in a notebook script (jupytext percent format) reads as a verdict of its own, one line each."""
    found = []
    for i, cell in enumerate(jupytext.reads(text, fmt="py:percent").cells):
        if cell.cell_type == "markdown":
            if HEADING.search(cell.source):
                found.append(f"cell {i}: a Verdicts section")
            judged_here = "bab/report/claims/" in cell.source  # the section that introduces the claims table
            for name, pattern in VERDICT_PATTERNS.items():
                if name == "a claim's outcome" and judged_here:
                    continue
                if name in ("a tolerance in points", "a tolerance in percent", "a claim's outcome"):
                    for match in re.finditer(pattern, cell.source, re.IGNORECASE):
                        found.append(f"cell {i} (markdown): {name}: {match.group(0)!r}")
        elif cell.cell_type == "code":
            for string in code_strings(cell.source):
                found += [f"cell {i}: {name}: {string!r}" for name, pattern in VERDICT_PATTERNS.items()
                          if re.search(pattern, string, re.IGNORECASE)]
    return found


def judgement_cells(text: str) -> tuple[set[str], list[tuple[str, bool]]]:
    """The names of the rows passed to save_results (or to finish_notebook, which saves them), and (rows name,
    whether the cell is checked by nbval) for each display(judgement_table(<name>)) in the script."""
    saved, shown = set(), []
    for cell in jupytext.reads(text, fmt="py:percent").cells:
        if cell.cell_type != "code":
            continue
        checked = "NBVAL_CHECK_OUTPUT" in cell.source
        for node in ast.walk(ast.parse(cell.source)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or not node.args:
                continue
            first = node.args[0]
            if node.func.id in ("save_results", "finish_notebook") and isinstance(first, ast.Name):
                saved.add(first.id)
            if (node.func.id == "display" and isinstance(first, ast.Call) and isinstance(first.func, ast.Name)
                    and first.func.id == "judgement_table" and first.args and isinstance(first.args[0], ast.Name)):
                shown.append((first.args[0].id, checked))
    return saved, shown


ROW_MAKERS = {"result_row", "mean_row"}


def rows_built_in_loops(text: str) -> list[str]:
    """Each call of a study's row maker (``result_row``, ``mean_row``) that a notebook script makes inside a loop or
    a comprehension: rows built one per measurement there, rather than by the study's row builders."""
    found = []
    loops = (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    for i, cell in enumerate(jupytext.reads(text, fmt="py:percent").cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        for loop in (node for node in ast.walk(tree) if isinstance(node, loops)):
            for node in ast.walk(loop):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ROW_MAKERS):
                    found.append(f"cell {i}, line {node.lineno}: {node.func.attr}")
    return sorted(set(found))


# ----------------------------------------------------------------------------- the checks find what they look for

# lines the notebooks printed before they showed the claims engine's judgement instead
OLD_VERDICTS = [
    'print(f"warm-start budgeted@0.5 within 2 points of dense: {warm_half >= dense_stats[\'accuracy\'] - 2}")',
    'print(f"hard-adapted @{b:.2f} within {tolerance} points of soft @{b:.2f}: {hard_minus_soft >= -tolerance}")',
    'print(f"measured speed-up @0.50 above the paper\'s 1.28x: {half.speedup > 1.28} ({half.speedup:.2f}x)")',
    'print(f"realises >= 90% of the analytic limit\'s time saving: {half.realised >= 0.9}")',
    'print(f"realised {100 * half.realised:.0f}% of the limit\'s time saving (>= 90%: {half.realised >= 0.9})")',
    'print(f"~80% specialist within 5% of dense perplexity: {ratio <= 1.05} ({ratio:.3f}x)")',
    'print(f"throughput at the long context >= 2x dense: {long80.throughput_ratio >= 2.0}")',
    'print(f"every budget delivered within 0.05: {bool(miss <= 0.05)}")',
    'warm_points["|cost - b| <= 0.05"] = (warm_points.cost - warm_points.budget).abs() <= 0.05',
    'print(f"Sparsifiner@{rate} beats Linformer at equal budget: {a > b}")',
    'print(f"learned pruning better than both static baselines at every sparsity: {bool(x)}")',
    'print(f"zero-shot claim ({kind}): {P.target_pruned:.0%} holds: {v[\'target_holds\']}")',
    'print(f"a verdict per keep rate: {ok}")',
    'print("reproduced")',
]
INVARIANTS = [
    'print(f"cost monotone over {len(sweep)} budgets: {ok}")',
    'print(f"dense solves the task (>= 90% validation accuracy): {ok}")',
    'print(f"long prompt >= 512 tokens: {long_context >= 512}")',
    'print(f"local windows within 0.02 of the fraction they were matched to: {ok}")',
    'print(f"our logits equal transformers\' (max |diff| < 1e-3): {ok}")',
    'print(f"learned pruning beats both static patterns at {n} of {m} sparsities")',
]


@pytest.mark.parametrize("line", OLD_VERDICTS)
def test_a_verdict_of_a_notebooks_own_is_found(line):
    assert own_verdicts(f"# %%\n{line}\n")


@pytest.mark.parametrize("line", INVARIANTS)
def test_an_invariant_is_not_taken_for_a_verdict(line):
    assert own_verdicts(f"# %%\n# NBVAL_CHECK_OUTPUT\n{line}\n") == []


def test_a_verdicts_section_is_found_and_the_claims_tables_introduction_is_not():
    assert own_verdicts("# %% [markdown]\n# ## Verdicts\n#\n# Printed for every profile.\n")
    intro = ("# %% [markdown]\n# ## What the papers' claims say on these rows\n#\n# The verdicts below are decided "
             "by the rules in `bab/report/claims/rules/`.\n")
    assert own_verdicts(intro) == []


def test_judgement_cells_pairs_the_table_with_the_saved_rows():
    text = ("# %%\nsave_results(rows, results_path)\n\n# %%\ndisplay(judgement_table(rows))\n\n"
            "# %%\n# NBVAL_CHECK_OUTPUT\ndisplay(judgement_table(other))\n")
    assert judgement_cells(text) == ({"rows"}, [("rows", False), ("other", True)])


def test_rows_built_in_a_loop_are_found_and_single_rows_are_not():
    looped = "# %%\nrows = [study.result_row(M.warm, b, evaluate(m, test, b), models=m) for b in budgets]\n"
    assert rows_built_in_loops(looped) == ["cell 0, line 1: result_row"]
    in_for = "# %%\nfor r in table.itertuples():\n    rows.append(exp.mean_row(M.x, r.budget, pairs))\n"
    assert rows_built_in_loops(in_for) == ["cell 0, line 2: mean_row"]
    single = "# %%\nrows = [study.result_row(M.dense, 1.0, dense_test, models=dense), *study.budget_rows(t, m)]\n"
    assert rows_built_in_loops(single) == []


# ----------------------------------------------------------------------------- the notebooks


def test_the_notebook_scripts_are_found():
    assert [p.name[:2] for p in SCRIPTS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_no_notebook_prints_a_verdict_of_its_own(script):
    found = own_verdicts(script.read_text())
    assert not found, (f"{script.name} decides a verdict itself; show judgement_table(rows) from "
                       f"bab.report.claims instead: " + "; ".join(found[:5]))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_notebook_shows_the_claims_engines_judgement_of_its_own_rows(script):
    text = script.read_text()
    saved, shown = judgement_cells(text)
    assert saved, f"{script.name} saves no result rows with save_results or finish_notebook"
    assert "from bab.report.claims import judgement_table" in text
    assert {name for name, _ in shown} == saved, (
        f"{script.name} saves {sorted(saved)} but displays judgement_table of {[name for name, _ in shown]}")
    # at smoke the verdicts mean nothing (a few hundred examples); nbval must not compare them
    assert not any(checked for _, checked in shown), f"{script.name} checks the judgement table with nbval"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_no_notebook_speaks_of_issues(script):
    lines = [f"{script.name}:{n}: {line.strip()}" for n, line in enumerate(script.read_text().splitlines(), 1)
             if ISSUE.search(line)]
    stored = json.loads(script.with_suffix(".ipynb").read_text())
    for i, cell in enumerate(stored["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(
                "".join(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
            lines += [f"{script.with_suffix('.ipynb').name} cell {i} output: {m.group(0)!r}"
                      for m in ISSUE.finditer(text)]
    assert not lines, "say what the code does, not what an issue asked: " + "; ".join(lines[:5])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_the_studies_build_each_notebooks_repeated_rows(script):
    found = rows_built_in_loops(script.read_text())
    assert not found, (f"{script.name} builds rows one per measurement itself; give its study a row builder "
                       f"(bab.experiments) instead: " + "; ".join(found[:5]))
