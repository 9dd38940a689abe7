"""RECORD.md is generated from a report folder's files; the committed one must be what they give."""

import json
import shutil
from pathlib import Path

import pytest

from bab.__main__ import main as bab_main
from bab.report.results.record import RECORD_NAME, code_digest, cost_table, current_code, record_markdown, write_record
from bab.report.results.seeds import split_seed_stem

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_paper_record_is_what_its_files_give(tmp_path):
    committed = ROOT / "reports" / "paper"
    copy = tmp_path / "paper"
    shutil.copytree(committed, copy)
    write_record(copy)
    assert (copy / RECORD_NAME).read_text() == (committed / RECORD_NAME).read_text(), (
        "reports/paper/RECORD.md is stale: run `python -m bab report pages --record-only reports/paper`")


def test_reports_readme_shows_what_the_committed_record_cost():
    committed = ROOT / "reports" / "paper"
    results = json.loads((committed / "results.json").read_text())
    runs = [json.loads(p.read_text()) for p in sorted((committed / "runs").glob("*.json"))]
    table = "\n".join(cost_table(results.get("models") or {}, runs))
    assert table in (ROOT / "reports" / "README.md").read_text(), (
        f"reports/README.md's cost table is not the committed record's; replace it with:\n{table}")


def test_rewriting_a_records_files_rewrites_the_cost_table_in_the_readme_beside_it(tmp_path):
    copy = tmp_path / "paper"
    shutil.copytree(ROOT / "reports" / "paper", copy)
    readme = tmp_path / "README.md"
    readme.write_text("# Before\n\n| notebook | wall time | models | their training time |\n|---|---|---|---|\n"
                      "| 01_old | 1 s | 1 | 1 s |\n| all | 1 s | 1 | 1 s |\n\n# After\n")
    assert bab_main(["report", "pages", "--record-only", str(copy)]) == 0
    results = json.loads((copy / "results.json").read_text())
    runs = [json.loads(p.read_text()) for p in sorted((copy / "runs").glob("*.json"))]
    table = "\n".join(cost_table(results.get("models") or {}, runs))
    assert readme.read_text() == f"# Before\n\n{table}\n\n# After\n"
    # a report of another profile leaves the committed record's table alone
    quick = tmp_path / "quick"
    shutil.copytree(copy, quick)
    (quick / "results.json").write_text(json.dumps({**results, "profile": "quick"}))
    readme.write_text("| notebook | wall time | models | their training time |\n| all | 1 s | 1 | 1 s |\n")
    assert bab_main(["report", "pages", "--record-only", str(quick)]) == 0
    assert readme.read_text() == "| notebook | wall time | models | their training time |\n| all | 1 s | 1 | 1 s |\n"


def test_the_cost_table_counts_a_shared_model_once_in_the_total():
    models = {"03": [{"run": "dense", "train_seconds": 3600.0}, {"run": "heads", "train_seconds": 1800.0}],
              "04": [{"run": "dense", "train_seconds": 3600.0}, {"run": "other", "train_seconds": None}]}
    runs = [{"notebook": "03", "seconds": 600.0}, {"notebook": "04", "seconds": 120.0}]
    assert cost_table(models, runs)[2:] == ["| 03 | 10 min 00 s | 2 | 1 h 30 min |",
                                            "| 04 | 2 min 00 s | 2 | 1 h 00 min |",
                                            "| all | 12 min 00 s | 3 | 1 h 30 min |"]


# a record a reader can browse and a clone can carry: pages, notebooks and figures of every run together
RECORD_LIMIT_BYTES = 20 * 1024 * 1024


def test_the_committed_records_stay_browsable_in_size():
    for profile in ("paper", "quick"):
        files = [p for p in (ROOT / "reports" / profile).rglob("*") if p.is_file()]
        total = sum(p.stat().st_size for p in files)
        assert total < RECORD_LIMIT_BYTES, (
            f"reports/{profile} holds {total / 2**20:.1f} MiB in {len(files)} files; keep a record under "
            f"{RECORD_LIMIT_BYTES / 2**20:.0f} MiB: downscale or compress the notebooks' figures")


def test_a_record_lists_claims_with_counts_and_every_notebook_run(tmp_path):
    results = {"profile": "quick", "generated_at": "2026-11-25T00:00:00+00:00", "contracts": {"02": 2},
               "claims": [{"id": "a", "paper": "sparsifiner", "where": "Table 2", "claim": "Keep 0.1 costs 0.4.",
                           "metric": "points", "setup": "a ViT | small", "verdict": "reproduced", "ours": -0.51,
                           "theirs": -0.4, "why": "-0.51 vs -0.40"}]}
    runs = [{"notebook": "02", "status": "ok", "seconds": 3725.0, "finished_at": "t", "commit": "abc123",
             "jobs": 2, "threads": 1}]
    text = record_markdown(results, runs)
    assert "- **sparsifiner**: 1 reproduced" in text
    assert "| sparsifiner | Table 2 | Keep 0.1 costs 0.4. (a ViT \\| small) | -0.51 | -0.4 | reproduced |" in text
    assert "| 02 | ok | 1 h 02 min | t | abc123 | 2 × 1 | not recorded |" in text
    folder = tmp_path / "r"
    (folder / "runs").mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "runs" / "02.json").write_text(json.dumps(runs[0]))
    assert bab_main(["report", "pages", "--record-only", str(folder)]) == 0
    assert (folder / RECORD_NAME).read_text() == text
    assert bab_main(["report", "pages", "--record-only", str(tmp_path / "missing")]) == 2


def test_a_record_says_which_commits_trained_each_notebooks_models():
    results = {"profile": "quick", "models": {"05": [
        {"run": "dense-1", "cached": True, "commit": "aaa1111", "train_seconds": 100.0},
        {"run": "joint-2", "cached": False, "commit": "bbb2222", "train_seconds": 3700.0},
        {"run": "heads-3", "cached": True, "commit": None, "train_seconds": None}]}}
    text = record_markdown(results, [])
    assert "| 05 | 3 | 1 | 2 | aaa1111, bbb2222, not recorded | 1 h 03 min |" in text
    assert "Not recorded" in record_markdown({"profile": "paper"}, [])


def test_a_record_says_which_measurements_came_from_the_run_cache_and_which_commits_made_them():
    results = {"profile": "paper", "measurements": {"07": [
        {"measurement": "a.json", "cached": True, "commit": "aaa1111", "seconds": 900.0},
        {"measurement": "b.json", "cached": True, "commit": "bbb2222", "seconds": 2800.0},
        {"measurement": "c.json", "cached": False, "commit": "bbb2222", "seconds": 60.0}]}}
    text = record_markdown(results, [])
    assert "## Measurements from the run cache" in text
    assert "| 07 | 3 | 1 | 2 | aaa1111, bbb2222 | 1 h 02 min |" in text
    assert "Measurements from the run cache" not in record_markdown({"profile": "paper"}, [])


def notebooks_section(text: str) -> str:
    """The "## Notebooks" section of a record's text, up to the next section."""
    return text.split("## Notebooks", 1)[1].split("\n## ", 1)[0]


def notebook(path, code, prose="A note."):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": [prose]},
             {"cell_type": "code", "metadata": {}, "source": code, "outputs": [], "execution_count": None}]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_run_is_marked_stale_once_its_notebooks_code_changes(tmp_path):
    nb = notebook(tmp_path / "02_x.ipynb", ["x = 1\n", "print(x)"])
    ran = code_digest(nb)
    assert code_digest(notebook(nb, "x = 1\nprint(x)", prose="Other prose.")) == ran  # prose and cell splits of
    # the source text do not count, the code does
    assert code_digest(notebook(tmp_path / "02_y.ipynb", "x = 2\nprint(x)")) != ran
    assert current_code(tmp_path) == {"02_x": ran, "02_y": code_digest(tmp_path / "02_y.ipynb")}
    assert current_code(tmp_path / "missing") == {}
    runs = [{"notebook": "02_x", "status": "ok", "seconds": 5.0, "code": ran},
            {"notebook": "02_y", "status": "ok", "seconds": 5.0, "code": ran},
            {"notebook": "03_z", "status": "ok", "seconds": 5.0, "code": ran}]
    rows = [line for line in notebooks_section(record_markdown({}, runs, current_code(tmp_path))).splitlines()
            if line.startswith("| 0")]
    assert [row.split("|")[-3].strip() for row in rows] == ["unchanged", "**changed since: stale**", "–"]


def test_a_run_is_marked_stale_once_the_bab_code_its_kernel_loaded_changes(tmp_path):
    import hashlib

    (tmp_path / "bab").mkdir()
    (tmp_path / "bab" / "a.py").write_text("x = 1\n")
    loaded = {"bab/a.py": hashlib.sha256(b"x = 1\n").hexdigest()[:16]}
    results = {"code": {"02_x": loaded}}
    runs = [{"notebook": "02_x", "status": "ok"}, {"notebook": "03_y", "status": "ok"}]

    def bab_code_column():
        text = record_markdown(results, runs, package_root=tmp_path)
        return [line.split("|")[-2].strip() for line in notebooks_section(text).splitlines() if line.startswith("| 0")]

    assert bab_code_column() == ["unchanged (1 modules)", "not recorded"]
    (tmp_path / "bab" / "a.py").write_text("x = 2\n")
    assert bab_code_column() == ["**changed since: stale** (`bab/a.py`)", "not recorded"]


# slow (about 50 s): nbconvert renders the committed record's 15 notebook pages, each compared byte for byte
@pytest.mark.slow
def test_pages_only_rebuilds_a_committed_records_pages_from_its_files(tmp_path, monkeypatch):
    copy = tmp_path / "paper"
    shutil.copytree(ROOT / "reports" / "paper", copy)
    (copy / "index.html").write_text("old page")
    for page in copy.glob("*_*.html"):  # every notebook page written again, whatever the clone's file times say
        page.unlink()
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path / "data"))
    assert bab_main(["report", "pages", str(copy), "--notebooks-dir", str(ROOT / "notebooks")]) == 0
    page = (copy / "index.html").read_text()
    assert "old page" not in page and "Which of the papers' claims hold" in page
    assert str(tmp_path) not in page and str(ROOT) not in page  # no path of this machine in the pages
    results = json.loads((copy / "results.json").read_text())
    notebooks = {split_seed_stem(stem)[0] for stem in results["notebooks"]}  # a seed's run counts for its notebook
    assert results["profile"] == "paper" and notebooks >= {"01_synthetic", "02_ag_news_custom", "05_vit_sparsifiner"}
    assert (copy / RECORD_NAME).read_text().startswith("# Reproduction record: profile `paper`")
    # byte for byte what is committed: the pages depend on the record's files only, not on this machine or the hour
    committed = ROOT / "reports" / "paper"
    differing = [str(p.relative_to(copy)) for p in sorted(copy.rglob("*")) if p.is_file()
                 and p.read_bytes() != (committed / p.relative_to(copy)).read_bytes()]
    assert not differing, (f"{differing} differ from the committed record's: rebuild its pages with `python -m bab "
                           f"report pages reports/paper`, then commit them")
    assert bab_main(["report", "pages", str(tmp_path / "missing")]) == 2
