"""bab installed as a user installs it: a wheel (not editable) in a fresh virtual environment, run from a folder
outside the repository. The commands work, and nothing is written into site-packages (checkpoints go to the user's
cache folder, ``$XDG_CACHE_HOME/bab/runs``).

The fresh environment gets bab alone; its dependencies are this environment's, reached through a path file, so the
test needs no network and no second copy of torch.
"""

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import api_fixtures
import pytest
from api_topics import topic_texts, write_csv

ROOT = Path(__file__).resolve().parents[2]
tiny_encoder = api_fixtures.tiny_encoder


def run(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{argv[:4]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


def snapshot(folder: Path) -> dict:
    """Every file under ``folder``: (size, mtime)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, bab console script, site-packages) of a fresh venv holding a non-editable install of bab."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"  # a copy: building in the checkout would leave build/ and *.egg-info there
    source.mkdir()
    shutil.copytree(ROOT / "bab", source / "bab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
         str(tmp / "wheel"), str(source)])
    wheel = next((tmp / "wheel").glob("bab-*.whl"))

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    packages = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # this environment's packages (torch, transformers, ...) behind the fresh one's own
    (packages / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)])
    return python, venv / "bin" / "bab", packages


@pytest.fixture
def user_env(tmp_path):
    """A user's environment: HOME and the cache folder in tmp, no bab variables, outside the repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAB_") and k != "PYTHONPATH"}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    (tmp_path / "work").mkdir()
    return env, tmp_path / "work"


def test_the_install_is_the_wheel_not_the_checkout(installed, user_env):
    python, _, packages = installed
    env, work = user_env
    where = run([str(python), "-c", "import bab; print(bab.__file__)"], cwd=work, env=env).stdout.strip()
    assert Path(where) == packages / "bab" / "__init__.py"
    assert str(ROOT) not in where and site.getsitepackages()[0] not in where


# slow (about 20 s): a fresh interpreter from the installed wheel imports torch and transformers, then fits
@pytest.mark.slow
def test_help_and_a_tiny_fit_from_outside_the_repository_write_nothing_into_site_packages(installed, user_env,
                                                                                          tiny_encoder):
    python, console_script, packages = installed
    env, work = user_env
    before = snapshot(packages)

    for command in ([str(python), "-m", "bab", "fit", "heads", "--help"], [str(console_script), "fit", "heads",
                                                                           "--help"]):
        shown = run(command, cwd=work, env=env).stdout
        assert "--train" in shown and "(default: 0.25,0.5,0.75)" in shown

    write_csv(work / "train.csv", topic_texts(20, seed=1))
    write_csv(work / "test.csv", topic_texts(5, seed=2))
    result = run([str(console_script), "fit", "heads", "--train", "train.csv", "--test", "test.csv", "--model",
                  str(tiny_encoder), "--out", "out", "--max-len", "16", "--batch-size", "8", "--epochs", "1,1,1",
                  "--timing-examples", "8", "--timing-repeats", "1", "--quiet"], cwd=work, env=env)
    headline, wrote = result.stdout.splitlines()
    assert headline.startswith("dense ") and "pruned @0.50: " in headline
    assert wrote.startswith("wrote out/: gated/, pruned-0.50/") and (work / "out" / "summary.html").is_file()
    assert "fewer than 20 texts" in result.stderr  # 18 training texts a class after the validation hold-out

    assert snapshot(packages) == before  # no checkpoint, cache or compiled file landed in site-packages
    runs = Path(env["XDG_CACHE_HOME"]) / "bab" / "runs"
    assert any(runs.iterdir()), "the run cache should default to $XDG_CACHE_HOME/bab/runs"
    assert sorted(p.name for p in work.iterdir()) == ["out", "test.csv", "train.csv"]  # nothing else in the cwd
