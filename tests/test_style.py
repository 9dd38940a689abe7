"""The code base stays lint-clean under the settings in pyproject.toml, the notebooks' paired scripts included."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def notebook_scripts():
    """notebooks/NN_*.py: the jupytext pairs of the notebooks (same cell sources as the .ipynb)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def test_ruff_finds_nothing():
    scripts = notebook_scripts()
    assert scripts, "no paired notebook scripts notebooks/NN_*.py"
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "bab", "tests", "conftest.py", *scripts],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_two_test_modules_share_a_file_name():
    """tests/ has no __init__.py files: pytest imports each test module by its file name, so two test_x.py in two
    rooms stop the run with an "import file mismatch" when one worker collects both."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in (Path(__file__).parent).rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]


def test_no_module_of_the_package_is_over_450_lines():
    """One idea a file: a module that grows past 450 lines is split by what it does (as experiments/ is by notebook)."""
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "bab").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert not long, f"modules over 450 lines: {long}"
