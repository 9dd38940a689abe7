"""Every notebooks/NN_*.ipynb agrees cell by cell with its paired jupytext script NN_*.py (jupytext.toml).

The .ipynb keeps the stored outputs that nbval compares; the .py is the same notebook as plain text.
When this fails, keep the side you edited: `jupytext --sync notebooks/NN_name.py` (or the .ipynb)
copies the newer file's sources to the other and leaves the outputs alone.
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from bab.report.runner.build import discover_notebooks
from bab.report.runner.notebooks import pair_differences, paired_script, prepare_pairs

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = discover_notebooks(ROOT / "notebooks")
EXAMPLE = ROOT / "notebooks" / "01_synthetic.ipynb"


def test_jupytext_toml_pairs_notebooks_with_clean_percent_scripts():
    config = tomllib.loads((ROOT / "jupytext.toml").read_text())
    assert config["formats"] == "ipynb,py:percent"
    assert config["notebook_metadata_filter"] == "-all"  # no kernel/jupytext header in the .py
    assert config["cell_metadata_filter"] == "tags,-all"  # the parameters tag must survive a sync from the .py


def test_every_notebook_has_a_script_and_every_script_a_notebook():
    scripts = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert [p.with_suffix(".ipynb") for p in scripts] == NOTEBOOKS


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_and_script_agree(ipynb):
    differences = pair_differences(ipynb)
    assert not differences, (
        f"{ipynb.name} and {paired_script(ipynb).name} disagree: " + "; ".join(differences[:5])
        + f". Run `jupytext --sync {paired_script(ipynb).relative_to(ROOT)}` (or the .ipynb, whichever you edited)"
    )


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_script_is_clean_and_notebook_has_one_parameters_cell(ipynb):
    text = paired_script(ipynb).read_text()
    assert text.startswith("# %%") and "jupytext_version" not in text and "kernelspec" not in text
    nb = nbformat.read(ipynb, as_version=4)
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1
    assert '# %% tags=["parameters"]' in text
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)


# ----------------------------------------------------------------------------- the check can fail


@pytest.fixture
def pair(tmp_path):
    """A copy of notebook 01 and its script in a folder with the repository's jupytext.toml."""
    shutil.copy(ROOT / "jupytext.toml", tmp_path)
    ipynb = Path(shutil.copy(EXAMPLE, tmp_path))
    shutil.copy(paired_script(EXAMPLE), tmp_path)
    assert pair_differences(ipynb) == []
    return ipynb


def edit_script(ipynb, old, new):
    script = paired_script(ipynb)
    text = script.read_text()
    assert text.count(old) == 1
    script.write_text(text.replace(old, new))


def test_an_edited_code_cell_in_the_script_is_found(pair):
    edit_script(pair, 'pd.set_option("display.precision", 3)', 'pd.set_option("display.precision", 4)')
    differences = pair_differences(pair)
    assert len(differences) == 1
    assert differences[0].startswith("cell 3 (code) source differs, line ")
    assert "'pd.set_option(\"display.precision\", 3)' vs 'pd.set_option(\"display.precision\", 4)'" in differences[0]


def test_an_edited_markdown_cell_in_the_notebook_is_found(pair):
    nb = nbformat.read(pair, as_version=4)
    assert nb.cells[0].cell_type == "markdown"
    nb.cells[0].source = nb.cells[0].source.replace("many attention budgets", "many budgets")
    nbformat.write(nb, pair)
    assert [d.split(",")[0] for d in pair_differences(pair)] == ["cell 1 (markdown) source differs"]
    old = os.stat(pair).st_mtime - 60
    os.utime(paired_script(pair), (old, old))  # the .ipynb is the newer side: refresh will not guess
    with pytest.raises(ValueError, match=r"01_synthetic.ipynb and 01_synthetic.py disagree \(cell 1 .*newer file"):
        prepare_pairs([pair])


def test_missing_cells_lost_tags_and_a_missing_script_are_found(pair):
    edit_script(pair, '# %% tags=["parameters"]\n', "# %%\n")
    assert pair_differences(pair) == ["cell 2: tags ['parameters'] vs []"]
    script = paired_script(pair)
    cut = script.read_text().rsplit("\n# %%", 1)[0] + "\n"  # drop the last cell
    script.write_text(cut)
    assert pair_differences(pair)[-1] == f"cell {len(nbformat.read(pair, as_version=4).cells)}: only in {pair.name}"
    script.unlink()
    assert "01_synthetic.py is missing" in pair_differences(pair)[0]


def test_a_newer_edited_script_is_synced_into_the_notebook_changing_only_that_source(pair, capsys):
    """prepare_pairs (before a refresh) = `jupytext --sync` with jupytext.toml: ids, tags, outputs kept."""
    before = nbformat.read(pair, as_version=4)
    edit_script(pair, 'pd.set_option("display.precision", 3)', 'pd.set_option("display.precision", 4)')
    old = os.stat(pair).st_mtime - 60
    os.utime(pair, (old, old))  # the .py is the newer side
    prepare_pairs([pair])
    assert "01_synthetic.ipynb: cell sources taken from the newer 01_synthetic.py" in capsys.readouterr().out
    after = nbformat.read(pair, as_version=4)
    assert pair_differences(pair) == []
    assert after.metadata == before.metadata and len(after.cells) == len(before.cells)
    for i, (a, b) in enumerate(zip(before.cells, after.cells, strict=True)):
        a, b = dict(a), dict(b)
        assert (a.pop("source") == b.pop("source")) == (i != 2), i
        assert a == b, i  # id, metadata (the parameters tag), outputs, execution_count


def test_pytest_never_imports_a_notebook_script_as_a_test():
    """`pytest notebooks/0*` names the .py pairs too; conftest.py skips them instead of running the notebook."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                             str(paired_script(EXAMPLE).relative_to(ROOT))], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert "01_synthetic.py is a notebook's jupytext pair, not a test" in result.stdout, result.stdout + result.stderr
    assert "1 skipped" in result.stdout and result.returncode == 5  # 5: no tests collected, nothing ran
