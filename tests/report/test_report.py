"""The report runner: papermill runs, failure handling, --only, and the never-lose-the-old-report swap."""

import contextlib
import io
import json
import math
import os
import re
import shutil
import sys
import types
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import torch

import bab.report.runner.build as report
import bab.report.runner.schedule as schedule
from bab.__main__ import main as bab_main
from bab.report.results.contract import ROWS_DIR_ENV, save_results
from bab.report.runner import progress

ROOT = Path(__file__).resolve().parents[2]

OK_CODE = """\
import os
import time
start = time.process_time()
while time.process_time() - start < 0.5:  # half a second of CPU, which the run record must count
    pass
from bab.report.results.contract import ROWS_DIR_ENV, save_results
note = (f"profile={profile} headless={os.environ.get('BAB_HEADLESS')} mpl={os.environ.get('MPLBACKEND')} "
        f"in_its_folder={os.path.exists('01_ok.ipynb')}")
save_results([{"experiment": "synthetic", "method": "dense", "budget": 1.0, "cost": 1.0,
               "accuracy": 99.5, "speedup": 1.0, "note": note}], results_path)
print("saved", interactive)
"""
FAIL_CODE = 'raise RuntimeError("boom from the notebook")'


def write_notebook(path, code):
    """A notebook with a 'parameters' cell followed by one code cell."""
    params = nbformat.v4.new_code_cell('profile = "smoke"\nresults_path = None\ninteractive = True')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def fake_paper(rows_seen=None, fail=False):
    """Stand-in for bab.report.results.paper with a comparison_table that echoes our rows next to a 'paper' column."""

    def comparison_table(rows):
        if fail:
            raise RuntimeError("no paper numbers")
        if rows_seen is not None:
            rows_seen.extend(rows)
        df = pd.DataFrame(rows, columns=["experiment", "method", "budget", "cost", "accuracy"])
        df.insert(4, "paper accuracy", 98.0)
        return df.rename(columns={"accuracy": "our accuracy", "cost": "our cost"})

    module = types.ModuleType("bab.report.results.paper")
    module.comparison_table = comparison_table
    return module


@pytest.fixture
def notebooks(tmp_path):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_ok.ipynb", OK_CODE)
    write_notebook(nb_dir / "02_fail.ipynb", FAIL_CODE)
    (nb_dir / "helper.ipynb").write_text("{}")  # not numbered: ignored
    return nb_dir


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One real papermill run over both notebooks; the tests below copy its reports folder."""
    tmp = tmp_path_factory.mktemp("first")
    nb_dir = tmp / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_ok.ipynb", OK_CODE)
    write_notebook(nb_dir / "02_fail.ipynb", FAIL_CODE)
    seen, out, chdirs = [], io.StringIO(), []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        real_chdir, here = os.chdir, os.path.realpath(os.getcwd())

        def chdir(path):  # papermill's file handler moves to where it started and back: harmless; elsewhere is not
            if os.path.realpath(path) != here:
                chdirs.append(str(path))
            real_chdir(path)

        mp.setattr(os, "chdir", chdir)
        mp.setitem(sys.modules, "bab.report.results.paper", fake_paper(seen))
        with contextlib.redirect_stdout(out):
            code = report.build_report("smoke", nb_dir, tmp / "reports")
    return types.SimpleNamespace(code=code, nb_dir=nb_dir, reports=tmp / "reports", stdout=out.getvalue(), seen=seen,
                                 chdirs=chdirs)


def copy_reports(first_run, tmp_path):
    dst = tmp_path / "reports"
    shutil.copytree(first_run.reports, dst)
    return dst


def fake_execute(src, out, profile, results_path, cwd, label="", seed=None, usage=None):
    """Execution without a kernel: copy the input notebook as 'executed'."""
    shutil.copy(src, out)


# ----------------------------------------------------------------------------- a real run


def test_failed_notebook_gives_exit_code_1_and_a_complete_report(first_run):
    assert first_run.code == 1
    out = first_run.reports / "smoke"
    for name in ("index.html", "results.json", "01_ok.html", "02_fail.html", "01_ok.ipynb", "02_fail.ipynb"):
        assert (out / name).exists(), name
    assert not list(first_run.reports.glob(".staging-*"))
    assert "[1/2] 01_ok ... ok (" in first_run.stdout
    assert "[2/2] 02_fail ... FAILED (" in first_run.stdout
    assert "RuntimeError: boom from the notebook" in first_run.stdout


def test_progress_names_each_notebook_and_each_code_cell_as_plain_lines(first_run):
    lines = first_run.stdout.splitlines()
    assert lines[0] == "running 2 notebooks at profile smoke; no earlier successful runs to estimate from"
    assert re.fullmatch(r"1 notebook at once, \d+ torch threads? each \(\d+ cores?\), training in float32 on cpu; "
                        r"the kernels: MKL.*", lines[1])
    assert lines[2] == "[1/2] 01_ok ... (no previous run)"
    # the parameters cell, papermill's injected parameters, the code cell: numbered like In [n]
    cells = [line for line in lines if line.startswith("      cell ")]
    assert [line.split()[1] for line in cells[:3]] == ["1/3", "2/3", "3/3"]
    assert cells[0].endswith('profile = "smoke"') and cells[1].endswith("# Parameters")
    assert cells[2].endswith("import os")
    assert all(re.fullmatch(r"      cell +\d+/\d+  \d+:\d\d  .*", line) for line in cells)
    assert "\r" not in first_run.stdout  # no tqdm redraws: a log file reads like the terminal
    assert lines.index("[2/2] 02_fail ... (no previous run)") > lines.index(cells[2])


def test_index_names_both_notebooks_and_shows_the_error(first_run):
    index = (first_run.reports / "smoke" / "index.html").read_text()
    assert "01_ok" in index and "02_fail" in index
    assert 'href="01_ok.html"' in index
    assert '<td class="failed">failed</td>' in index and '<td class="ok">ok</td>' in index
    assert "boom from the notebook" in index
    assert "paper accuracy" in index  # the comparison table
    for what in ("torch", "transformers", "python", "smoke"):
        assert what in index


def test_the_pages_read_offline_and_name_no_folder_of_the_machine(first_run):
    from bab.report.pages.notebook_pages import MATHJAX_URL

    out = first_run.reports / "smoke"
    assert (out / MATHJAX_URL).is_file()  # beside the pages, which load it by a relative URL
    for name in ("01_ok.html", "02_fail.html", "index.html"):
        page = (out / name).read_text()
        assert str(first_run.reports.parent) not in page and "<checkout>" not in page, name
        assert not re.search(r'<script[^>]*src="(?:https?:)?//', page), name
    page = (out / "01_ok.html").read_text()
    assert f'src="{MATHJAX_URL}"' in page
    assert 'results_path = "results/01_ok.json"' in re.sub(r"<[^>]+>", "", page).replace("&quot;", '"')


def test_a_kernel_killed_mid_cell_fails_the_run_instead_of_hanging_it(tmp_path):
    # a kernel killed for memory once left a lane waiting for its output for hours
    from concurrent.futures import ThreadPoolExecutor

    from nbclient.exceptions import DeadKernelError

    write_notebook(tmp_path / "die.ipynb", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(report.execute_notebook, tmp_path / "die.ipynb", tmp_path / "out.ipynb", "smoke",
                          tmp_path / "rows.json", tmp_path)
        with pytest.raises(DeadKernelError):
            run.result(timeout=300)


def test_notebooks_run_in_their_folder_without_moving_this_process(first_run):
    # two notebooks at once run in threads of one process: a chdir by one would move the other's relative paths
    # (a build once ended reading reports/quick/results.json from inside notebooks/)
    assert first_run.chdirs == []
    saved = json.loads((first_run.reports / "smoke" / "results" / "01_ok.json").read_text())
    assert saved["rows"][0]["note"].endswith("in_its_folder=True")


def test_run_records_and_results(first_run):
    out = first_run.reports / "smoke"
    failed = json.loads((out / "runs" / "02_fail.json").read_text())
    assert failed["status"] == "failed" and failed["notebook"] == "02_fail"
    assert failed["error"]["ename"] == "RuntimeError"
    assert "boom from the notebook" in failed["error"]["evalue"]
    assert "boom from the notebook" in failed["error"]["traceback"]
    assert "\x1b[" not in failed["error"]["traceback"]
    ok = json.loads((out / "runs" / "01_ok.json").read_text())
    assert ok["status"] == "ok" and ok["error"] is None and ok["seconds"] > 0 and ok["finished_at"]
    # the kernel's CPU time, measured from outside it: the notebook's busy half second and its start, not the waits
    assert 0.5 <= ok["cpu_seconds"] < ok["seconds"] + 1
    assert failed["cpu_seconds"] > 0
    assert ok["commit"] == "unknown"  # the notebooks folder of this test is no git checkout
    saved = json.loads((out / "results" / "01_ok.json").read_text())
    assert saved["notebook"] == "01_ok"
    # parameters and env reached the kernel
    assert saved["rows"][0]["note"] == ("profile=smoke headless=1 mpl=module://matplotlib_inline.backend_inline "
                                        "in_its_folder=True")
    merged = json.loads((out / "results.json").read_text())
    assert merged["notebooks"] == {"01_ok": "ok", "02_fail": "failed"}
    assert [r["notebook"] for r in merged["rows"]] == ["01_ok"]
    assert first_run.seen and first_run.seen[0]["method"] == "dense"


def test_only_reruns_selected_and_keeps_the_others(first_run, tmp_path, monkeypatch):
    reports = copy_reports(first_run, tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    old_record = json.loads((reports / "smoke" / "runs" / "01_ok.json").read_text())
    code = report.build_report("smoke", first_run.nb_dir, reports, only="01")
    assert code == 0  # only the selected notebook counts
    out = reports / "smoke"
    assert (out / "02_fail.html").exists()
    assert json.loads((out / "runs" / "02_fail.json").read_text())["status"] == "failed"
    new_record = json.loads((out / "runs" / "01_ok.json").read_text())
    assert new_record["finished_at"] >= old_record["finished_at"] and new_record["status"] == "ok"
    merged = json.loads((out / "results.json").read_text())
    assert merged["notebooks"] == {"01_ok": "ok", "02_fail": "failed"}
    assert len(merged["rows"]) == 1
    assert "02_fail" in (out / "index.html").read_text()
    assert not list(reports.glob(".staging-*")) and not list(reports.glob(".old-*"))


# ----------------------------------------------------------------------------- the last run as an estimate


def write_run(reports, profile, stem, status, seconds):
    report.write_json_atomic(reports / profile / "runs" / f"{stem}.json",
                             {"notebook": stem, "status": status, "seconds": seconds, "error": None})


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")
def test_git_commit_names_the_checkout_and_says_when_code_differs_from_it(tmp_path):
    import subprocess

    from bab.core.provenance import git_commit

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "reports").mkdir()
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "reports" / "index.html").write_text("old report\n")
    git("add", ".")
    git("commit", "-qm", "first")
    head = git("rev-parse", "--short", "HEAD")
    assert git_commit(tmp_path) == head
    (tmp_path / "reports" / "index.html").write_text("a new report\n")  # a report run: still the commit's code
    (tmp_path / "untracked.py").write_text("y = 2\n")  # untracked files are not the code that ran
    assert git_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == head + "+dirty"


def test_last_run_reads_the_previous_reports_run_records(tmp_path):
    reports = tmp_path / "reports"
    write_run(reports, "quick", "03_bert_ag_news", "ok", 212.4)
    write_run(reports, "quick", "04_dbpedia_bert", "failed", 12.0)
    write_run(reports, "paper", "03_bert_ag_news", "ok", 5400.0)
    (reports / "quick" / "runs" / "05_vit.json").write_text("{not json")
    records = [progress.last_run(reports, "quick", stem) for stem in ("03_bert_ag_news", "04_dbpedia_bert", "05_vit",
                                                                     "06_gpt2")]
    assert [progress.last_run_note(r) for r in records] == [
        "(last run 212 s)", "(last run failed after 12 s)", "(no previous run)", "(no previous run)"]
    assert progress.last_run_note(progress.last_run(reports, "paper", "03_bert_ag_news")) == "(last run 90 min)"
    assert progress.last_run(tmp_path / "nowhere", "quick", "03_bert_ag_news") is None
    assert progress.estimate_line(records, "quick") == (
        "running 4 notebooks at profile quick; the last report took 212 s for the 1 of them that ran ok")
    assert progress.estimate_line(records[:1], "quick") == (
        "running 1 notebook at profile quick; the last report took 212 s for them")


def test_a_rerun_shows_the_last_runs_time(first_run, tmp_path, monkeypatch, capsys):
    reports = copy_reports(first_run, tmp_path)
    monkeypatch.setattr(report, "execute_notebook", fake_execute)
    monkeypatch.setattr(report, "convert_to_html", lambda ipynb, out: Path(out).write_text("<html></html>"))
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    runs = reports / "smoke" / "runs"
    ok, failed = (json.loads((runs / f"{stem}.json").read_text())["seconds"] for stem in ("01_ok", "02_fail"))
    report.build_report("smoke", first_run.nb_dir, reports)
    out = capsys.readouterr().out.splitlines()
    estimate = f"the last report took {ok:.0f} s for the 1 of them that ran ok"
    assert out[0] == f"running 2 notebooks at profile smoke; {estimate}"
    assert out[2] == f"[1/2] 01_ok ... (last run {ok:.0f} s)"
    assert f"[2/2] 02_fail ... (last run failed after {failed:.0f} s)" in out


def test_cell_summary_and_progress_line():
    assert progress.cell_summary("\n# NBVAL_CHECK_OUTPUT\n  x = 1\ny = 2") == "x = 1"
    assert progress.cell_summary("a" * 100, width=10) == "a" * 9 + "…"
    stream = io.StringIO()
    on_cell = progress.CellProgress(stream=stream)
    cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("a = 1"),
             nbformat.v4.new_code_cell("")]
    for i, cell in enumerate(cells):
        on_cell(cell, i, cells)
    assert stream.getvalue() == "      cell  1/2  0:00  a = 1\n      cell  2/2  0:00\n"


def test_the_progress_repeats_a_cells_resume_lines():
    stream = io.StringIO()
    cell = nbformat.v4.new_code_cell("study.dense()")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr",
                                           text="some warning\nresuming gpt2-dense (lm) at step 312/1000\n"),
                    nbformat.v4.new_output("execute_result", data={"text/plain": "resuming is not a stream"})]
    progress.CellProgress(stream=stream).completed(cell)
    assert stream.getvalue() == "            resuming gpt2-dense (lm) at step 312/1000\n"


# ----------------------------------------------------------------------------- never lose the old report


@pytest.mark.parametrize("only", [None, "01"])
def test_interrupt_keeps_the_previous_report(first_run, tmp_path, monkeypatch, only):
    reports = copy_reports(first_run, tmp_path)
    before = {p.relative_to(reports): p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    monkeypatch.setattr(report, "execute_notebook", fake_execute)

    def interrupted(ipynb, out):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "convert_to_html", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.build_report("smoke", first_run.nb_dir, reports, only=only)
    after = {p.relative_to(reports): p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    assert after == before
    assert not list(reports.glob(".staging-*"))


def test_cli_reports_interrupt_and_keeps_report(first_run, tmp_path, monkeypatch, capsys):
    reports = copy_reports(first_run, tmp_path)
    index = (reports / "smoke" / "index.html").read_bytes()
    monkeypatch.setattr(report, "execute_notebook", fake_execute)
    monkeypatch.setattr(report, "write_index", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    argv = ["report", "--profile", "smoke", "--notebooks-dir", str(first_run.nb_dir), "--reports-dir", str(reports)]
    assert bab_main(argv) == 130
    assert "previous report was kept" in capsys.readouterr().err
    assert (reports / "smoke" / "index.html").read_bytes() == index
    assert not list(reports.glob(".staging-*"))


def test_new_report_without_previous_and_broken_comparison_table(notebooks, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "execute_notebook", fake_execute)
    monkeypatch.setattr(report, "convert_to_html", lambda ipynb, out: Path(out).write_text("<html></html>"))
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper(fail=True))
    code = report.build_report("quick", notebooks, tmp_path / "reports", only="01")
    assert code == 1  # notebook fine, but the comparison table could not be built
    index = (tmp_path / "reports" / "quick" / "index.html").read_text()
    assert "Comparison table unavailable" in index and "no paper numbers" in index
    assert "not run" in index  # 02_fail was never run in this profile
    assert "comparison table FAILED" in capsys.readouterr().out


def test_index_escapes_error_text(notebooks, tmp_path, monkeypatch):
    def execute(src, out, profile, results_path, cwd, label="", seed=None, usage=None):
        raise ValueError("<script>alert(1)</script>")

    monkeypatch.setattr(report, "execute_notebook", execute)
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    assert report.build_report("smoke", notebooks, tmp_path / "reports") == 1
    index = (tmp_path / "reports" / "smoke" / "index.html").read_text()
    assert "<script>alert" not in index and "&lt;script&gt;alert(1)" in index


# ----------------------------------------------------------------------------- clear errors


def test_unknown_profile_and_prefix_raise_clear_errors(notebooks, tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown profile 'fast'.*smoke, quick, record, paper"):
        report.build_report("fast", notebooks, tmp_path / "reports")
    with pytest.raises(ValueError, match="unknown notebook prefix '07'.*available prefixes: 01, 02"):
        report.build_report("smoke", notebooks, tmp_path / "reports", only="01,07")
    with pytest.raises(ValueError, match="no notebooks matching"):
        report.build_report("smoke", tmp_path, tmp_path / "reports")
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())
    assert bab_main(["report", "--profile", "fast", "--notebooks-dir", str(notebooks)]) == 2
    assert "unknown profile" in capsys.readouterr().err
    assert bab_main([]) == 2 and bab_main(["nope"]) == 2


THREADS_CODE = """\
import os, time
from bab.core.threads import set_threads
threads = set_threads()  # as every notebook starts
time.sleep(3)  # long enough that both kernels are alive at once
print("threads", os.environ.get("BAB_THREADS"), threads)
"""


def test_two_jobs_run_notebooks_at_once_with_the_cores_divided(tmp_path, monkeypatch):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    for name in ("01_a", "02_b", "03_c"):
        write_notebook(nb_dir / f"{name}.ipynb", THREADS_CODE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setattr(report, "available_cores", lambda: 4)
    monkeypatch.setattr(schedule, "available_cores", lambda: 4)
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report.build_report("smoke", nb_dir, tmp_path / "reports", jobs=2)
    assert code == 0
    stdout = out.getvalue()
    assert "2 notebooks at once, 2 torch threads each (4 cores)" in stdout
    assert re.search(r"^      0[123] cell  2/3  ", stdout, re.M)  # cell lines carry the notebook's number
    runs = tmp_path / "reports" / "smoke" / "runs"
    records = [json.loads((runs / f"{name}.json").read_text()) for name in ("01_a", "02_b", "03_c")]
    assert [(r["status"], r["jobs"], r["threads"]) for r in records] == [("ok", 2, 2)] * 3
    for name in ("01_a", "02_b", "03_c"):
        executed = nbformat.read(str(tmp_path / "reports" / "smoke" / f"{name}.ipynb"), as_version=4)
        assert executed.cells[-1].outputs[0]["text"].strip() == "threads 2 2"  # the variable reached the kernel
    starts = [float(json.loads((runs / f"{n}.json").read_text())["seconds"]) for n in ("01_a", "02_b", "03_c")]
    assert sum(starts) > 1.4 * float(re.search(r"notebooks done in (\d+) s", stdout).group(1))  # overlapped


def test_notebooks_start_in_the_order_that_ends_soonest_and_the_jobs_default():
    # two jobs, each taking the next notebook when free: 3, 3 | 2 after 3 | 2 after 3 | 2 after 5 -> ends at 7
    assert schedule.planned_finish([3, 3, 2, 2, 2], jobs=2) == 7
    assert schedule.planned_finish([3, 3, 2, 2, 2], jobs=1) == 12
    a, b, c, d, e = (report.NotebookRun(Path(f"0{i}_{n}.ipynb")) for i, n in enumerate("abcde", 1))
    runs = [{"seconds": s} for s in (5.0, 4.0, 3.0, 3.0, 3.0)]
    # longest first ends at 10 (a | b, c after b, d after a, e after c); {a, b} beside {c, d, e} ends at 9
    assert schedule.planned_finish([5, 4, 3, 3, 3], jobs=2) == 10
    order = schedule.start_order([a, b, c, d, e], runs, jobs=2)
    seconds = {p: r["seconds"] for p, r in zip([a, b, c, d, e], runs, strict=True)}
    assert schedule.planned_finish([seconds[p] for p in order], jobs=2) == 9 and order[0] == a
    assert schedule.start_order([a, b, c, d, e], runs, jobs=1) == [a, b, c, d, e]  # one job: nothing to plan
    # no run measured before: notebook order; a notebook never run beside measured ones counts as the longest, so
    # it starts at once, beside the longest measured one
    fresh = [report.NotebookRun(Path(f"{s}.ipynb")) for s in ("01_x", "02_y", "03_z")]
    assert schedule.start_order(fresh, [None] * 3, jobs=2) == fresh
    mixed = schedule.start_order([a, b, c, d], [{"seconds": 1.0}, None, {"seconds": 2.0}, None], jobs=2)
    assert mixed[-1] == a and set(mixed[:3]) == {b, c, d}  # b and d count as 2 s, the longest measured
    assert not hasattr(report, "QUICK_SECONDS")  # no seconds typed into code
    assert schedule.default_jobs(cores=1) == 1 and schedule.default_jobs(cores=2) == min(2, schedule.DEFAULT_JOBS)
    assert schedule.threads_per_job(2, cores=2) == 1 and schedule.threads_per_job(3, cores=2) == 1
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="--jobs must be a positive whole number"):
            schedule.check_jobs(bad)
        with pytest.raises(ValueError, match="--threads must be a positive whole number"):
            schedule.check_threads(bad)
    assert schedule.check_threads(None) is None and schedule.check_threads(3) == 3


def test_threads_override_the_cores_divided_among_the_jobs(tmp_path, monkeypatch):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_a.ipynb", THREADS_CODE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setattr(report, "available_cores", lambda: 4)
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # one notebook alone would get all 4 cores; --threads 1 gives it one
        code = report.build_report("smoke", nb_dir, tmp_path / "reports", only="01", threads=1)
    assert code == 0
    assert "1 notebook at once, 1 torch thread each (4 cores)" in out.getvalue()
    record = json.loads((tmp_path / "reports" / "smoke" / "runs" / "01_a.json").read_text())
    assert (record["jobs"], record["threads"]) == (1, 1)
    executed = nbformat.read(str(tmp_path / "reports" / "smoke" / "01_a.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "threads 1 1"  # the kernel ran on one thread


PRECISION_CODE = """\
import os
from bab.heads.train import TrainConfig
print("precision", os.environ.get("BAB_PRECISION"), TrainConfig().precision)
"""


@pytest.mark.parametrize("asked, env, runs", [("bfloat16", None, "bfloat16"), (None, "bfloat16", "bfloat16"),
                                              (None, None, "float32"), ("float32", "bfloat16", "float32")])
def test_the_report_precision_reaches_the_kernels_training_configs_and_the_run_record(tmp_path, monkeypatch, asked,
                                                                                     env, runs):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_a.ipynb", PRECISION_CODE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if env is None:
        monkeypatch.delenv("BAB_PRECISION", raising=False)
    else:
        monkeypatch.setenv("BAB_PRECISION", env)
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report.build_report("smoke", nb_dir, tmp_path / "reports", threads=1, precision=asked)
    assert code == 0 and f"training in {runs}" in out.getvalue()
    record = json.loads((tmp_path / "reports" / "smoke" / "runs" / "01_a.json").read_text())
    assert record["precision"] == runs
    executed = nbformat.read(str(tmp_path / "reports" / "smoke" / "01_a.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == f"precision {runs} {runs}"
    assert os.environ.get("BAB_PRECISION") == env  # the caller's environment is restored


DEVICE_CODE = """\
import os
from bab.core.device import training_device
print("device", os.environ.get("BAB_DEVICE"), training_device())
"""


def test_the_report_device_reaches_the_kernels_and_the_run_record(tmp_path, monkeypatch):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_a.ipynb", DEVICE_CODE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("BAB_DEVICE", "auto")
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report.build_report("smoke", nb_dir, tmp_path / "reports", threads=1, device="cpu")
    assert code == 0 and "training in float32 on cpu" in out.getvalue()
    record = json.loads((tmp_path / "reports" / "smoke" / "runs" / "01_a.json").read_text())
    assert record["device"] == "cpu"
    executed = nbformat.read(str(tmp_path / "reports" / "smoke" / "01_a.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "device cpu cpu"
    assert os.environ.get("BAB_DEVICE") == "auto"  # the caller's environment is restored


def test_a_report_on_cuda_without_a_gpu_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no GPU"):
        report.build_report("smoke", tmp_path / "notebooks", tmp_path / "reports", device="cuda")
    assert not (tmp_path / "reports").exists()


def test_an_unknown_report_precision_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="precision must be one of"):
        report.build_report("smoke", tmp_path / "notebooks", tmp_path / "reports", precision="float16")
    assert not (tmp_path / "reports").exists()


def test_select_notebooks_by_prefix(notebooks):
    found = report.discover_notebooks(notebooks)
    assert [p.name for p in found] == ["01_ok.ipynb", "02_fail.ipynb"]
    assert [p.name for p in report.select_notebooks(found, "02")] == ["02_fail.ipynb"]
    assert [p.name for p in report.select_notebooks(found, ["01", "02"])] == ["01_ok.ipynb", "02_fail.ipynb"]
    assert report.select_notebooks(found, None) == found


# ----------------------------------------------------------------------------- python -m bab notebooks refresh

REFRESH_CODE = """\
import os
print("profile", profile, "threads", os.environ.get("BAB_THREADS"), "cache empty:",
      os.listdir(os.environ["BAB_CACHE_DIR"]) == [], "MKL", os.environ.get("MKL_CBWR"))
open(os.path.join(os.environ["BAB_CACHE_DIR"], "run"), "w").close()
"""


def write_pair(ipynb):
    """The paired percent-format script, as jupytext --sync writes it."""
    import jupytext

    jupytext.write(nbformat.read(ipynb, as_version=4), paired_script(ipynb), fmt="py:percent")


def paired_script(ipynb):
    return Path(ipynb).with_suffix(".py")


@pytest.fixture
def refresh_dir(tmp_path):
    shutil.copy(ROOT / "jupytext.toml", tmp_path)  # pairs NN_*.ipynb with NN_*.py below, as in the repository
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_notebook(nb_dir / "01_ok.ipynb", REFRESH_CODE)
    write_notebook(nb_dir / "02_fail.ipynb", FAIL_CODE)
    write_notebook(nb_dir / "03_ok.ipynb", REFRESH_CODE)
    for ipynb in nb_dir.glob("*.ipynb"):
        write_pair(ipynb)
        os.utime(paired_script(ipynb), (1e9, 1e9))  # an old .py: refresh must leave it no older than the .ipynb
    return nb_dir


def test_refresh_stores_outputs_keeps_pairs_and_leaves_a_failed_notebook_untouched(refresh_dir, monkeypatch, capsys):
    from bab.report.compare.regression import SMOKE_NUMERICS_ENV, SMOKE_THREADS
    from bab.report.runner.notebooks import pair_differences

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("BAB_CACHE_DIR", "/nonexistent/cache")
    monkeypatch.setenv("BAB_THREADS", "2")  # the kernels run at the smoke references' count all the same
    monkeypatch.delenv("MKL_CBWR", raising=False)
    failed_before = (refresh_dir / "02_fail.ipynb").read_bytes()
    scripts_before = {p.name: p.read_bytes() for p in refresh_dir.glob("*.py")}
    code = bab_main(["notebooks", "refresh", "--notebooks-dir", str(refresh_dir)])
    out = capsys.readouterr().out
    assert code == 1
    assert "[2/3] 02_fail ... FAILED (" in out and "stored notebook unchanged: RuntimeError: boom" in out
    assert "[3/3] 03_ok ... stored (" in out and "      cell  2/2  0:" in out
    assert "refresh FAILED for 02_fail" in out
    assert (refresh_dir / "02_fail.ipynb").read_bytes() == failed_before
    for stem in ("01_ok", "03_ok"):  # one empty run cache for the whole refresh, the notebooks in order
        nb = nbformat.read(refresh_dir / f"{stem}.ipynb", as_version=4)
        text = "".join(o.get("text", "") for o in nb.cells[1].outputs)
        assert text == (f"profile smoke threads {SMOKE_THREADS} cache empty: {stem == '01_ok'} "
                        f"MKL {SMOKE_NUMERICS_ENV['MKL_CBWR']}\n")
        assert "papermill" not in nb.metadata
        assert all("papermill" not in c.metadata and "execution" not in c.metadata for c in nb.cells)
        assert [c.metadata.get("tags") for c in nb.cells] == [["parameters"], None]  # no empty tags added
    for ipynb in refresh_dir.glob("*.ipynb"):
        assert pair_differences(ipynb) == []
        assert os.stat(paired_script(ipynb)).st_mtime >= os.stat(ipynb).st_mtime or ipynb.stem == "02_fail"
    assert {p.name: p.read_bytes() for p in refresh_dir.glob("*.py")} == scripts_before
    assert os.environ["BAB_CACHE_DIR"] == "/nonexistent/cache" and os.environ["BAB_THREADS"] == "2"
    assert "MKL_CBWR" not in os.environ  # the caller's environment, restored
    assert sorted(p.name for p in refresh_dir.iterdir()) == [
        "01_ok.ipynb", "01_ok.py", "02_fail.ipynb", "02_fail.py", "03_ok.ipynb", "03_ok.py"]  # no temp files left


def edit_refresh_script(ipynb, newer):
    script = paired_script(ipynb)
    script.write_text(script.read_text().replace('"cache empty:"', '"cache is empty:"'))
    when = os.stat(ipynb).st_mtime + (60 if newer else -60)
    os.utime(script, (when, when))


def test_refresh_refuses_a_pair_that_disagrees_with_the_notebook_newer(refresh_dir, monkeypatch, capsys):
    import bab.report.runner.notebooks as notebooks

    edit_refresh_script(refresh_dir / "03_ok.ipynb", newer=False)
    monkeypatch.setattr(notebooks, "refresh_notebook", lambda *a, **k: pytest.fail("ran a notebook"))
    assert bab_main(["notebooks", "refresh", "--notebooks-dir", str(refresh_dir)]) == 2
    err = capsys.readouterr().err
    assert "03_ok.ipynb and 03_ok.py disagree (cell 2 (code) source differs, line 2" in err
    assert "the .ipynb is the newer file" in err and "jupytext --sync" in err
    assert bab_main(["notebooks", "refresh", "--notebooks-dir", str(refresh_dir), "--only", "07"]) == 2


def test_refresh_takes_the_sources_of_a_newer_edited_script_first(refresh_dir, monkeypatch, capsys):
    import bab.report.runner.notebooks as notebooks

    ipynb = refresh_dir / "03_ok.ipynb"
    edit_refresh_script(ipynb, newer=True)
    ran = []
    monkeypatch.setattr(notebooks, "refresh_notebook", lambda path, cache, on_cell: ran.append(path.name) or 1.0)
    assert bab_main(["notebooks", "refresh", "--notebooks-dir", str(refresh_dir), "--only", "03"]) == 0
    assert ran == ["03_ok.ipynb"]
    assert "03_ok.ipynb: cell sources taken from the newer 03_ok.py" in capsys.readouterr().out
    nb = nbformat.read(ipynb, as_version=4)
    assert '"cache is empty:"' in nb.cells[1].source and nb.cells[0].metadata.tags == ["parameters"]
    assert notebooks.pair_differences(ipynb) == []


# ----------------------------------------------------------------------------- save_results


GOOD = {
    "experiment": "synthetic",
    "method": "warm-start budgeted",
    "budget": 0.5,
    "cost": 0.52,
    "accuracy": 97.1,
    "speedup": None,
}


def test_save_results_writes_atomically_and_creates_dirs(tmp_path, monkeypatch):
    monkeypatch.delenv(ROWS_DIR_ENV, raising=False)  # ./run_all.sh test sets it for the notebooks
    path = tmp_path / "deep" / "results" / "03_bert.json"
    assert save_results([GOOD, {**GOOD, "budget": 1, "note": "ints are fine"}], path) == path
    data = json.loads(path.read_text())
    assert data["notebook"] == "03_bert"
    assert data["rows"][0] == GOOD and data["rows"][1]["budget"] == 1.0
    assert [p.name for p in path.parent.iterdir()] == ["03_bert.json"]  # no temp files left
    assert save_results([GOOD], None) is None
    # without a results_path, under nbval: the rows go to $BAB_RESULTS_DIR, named by their experiments
    monkeypatch.setenv(ROWS_DIR_ENV, str(tmp_path / "rows"))
    written = save_results([GOOD], None)
    assert written == tmp_path / "rows" / "synthetic.json" and json.loads(written.read_text())["rows"] == [GOOD]


@pytest.mark.parametrize(
    "row, message",
    [
        ({k: v for k, v in GOOD.items() if k != "cost"}, "row 1: missing key 'cost'"),
        ({**GOOD, "accuracy": "97%"}, "row 1: key 'accuracy' must be a float or None"),
        ({**GOOD, "speedup": True}, "row 1: key 'speedup' must be a float or None"),
        ({**GOOD, "cost": math.nan}, "row 1: key 'cost' must be finite"),
        ({**GOOD, "method": 3}, "row 1: key 'method' must be a non-empty str"),
        ({**GOOD, "note": 1}, "row 1: key 'note' must be a str"),
        ({**GOOD, "acuracy": 1.0}, "row 1: unknown key 'acuracy'"),
        ("not a dict", "row 1: must be a dict"),
        # typed ids: the experiment must declare the method, and the budget and settings must fit it
        ({**GOOD, "method": "warm start budgeted"}, "row 1: experiment 'synthetic' declares no method"),
        ({**GOOD, "experiment": "synthtic"}, "row 1: unknown experiment 'synthtic'"),
        ({**GOOD, "method": "dense", "budget": 0.5}, "row 1: .*dense reference: its budget is 1.0"),
        ({**GOOD, "budget": None}, r"row 1: .*needs a budget in \(0, 1\]"),
        ({**GOOD, "budget": 1.5}, r"row 1: .*needs a budget in \(0, 1\], got 1.5"),
        ({**GOOD, "settings": {"gamma": 0.1}}, r"row 1: .*takes the settings \[\], got \['gamma'\]"),
        ({**GOOD, "experiment": "gpt2_context_pruning", "method": "context pruning", "budget": None},
         r"row 1: .*takes the settings \['gamma'\], got \[\]"),
    ],
)
def test_save_results_rejects_bad_rows(tmp_path, row, message):
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match=message):
        save_results([GOOD, row], path)
    assert not path.exists()


def test_save_results_rejects_a_single_dict(tmp_path):
    with pytest.raises(ValueError, match="list of dicts"):
        save_results(GOOD, tmp_path / "r.json")


def test_a_report_keeps_no_absolute_path_of_the_machine(tmp_path, monkeypatch):
    checkout, data = tmp_path / "checkout", tmp_path / "data"
    pages = checkout / "reports" / "paper"
    pages.mkdir(parents=True)
    data.mkdir()
    monkeypatch.setenv("BAB_DATA_DIR", str(data))
    (pages / "02.ipynb").write_text(json.dumps({"results_path": f"{checkout}/reports/.staging-x/results/02.json",
                                                "data": f"{data}/ag_news"}))
    (pages / "index.html").write_text(f"<td>{data}</td><td>{checkout}/notebooks/02.ipynb</td>")
    report.scrub_machine_paths(pages, checkout)
    assert json.loads((pages / "02.ipynb").read_text()) == {
        "results_path": "<checkout>/reports/.staging-x/results/02.json", "data": "$BAB_DATA_DIR/ag_news"}
    (pages / "03.ipynb").write_text(json.dumps({"results_path": f"{pages}/results/03.json"}))  # a folder anywhere
    report.scrub_machine_paths(pages, checkout)
    assert json.loads((pages / "03.ipynb").read_text()) == {"results_path": "<report>/results/03.json"}
    assert (pages / "index.html").read_text() == "<td>$BAB_DATA_DIR</td><td><checkout>/notebooks/02.ipynb</td>"
    assert str(tmp_path) not in (pages / "02.ipynb").read_text() + (pages / "index.html").read_text()
    # the Python environment of another checkout (lanes run from a second clone with the first one's .venv)
    elsewhere = tmp_path / "other" / ".venv"
    monkeypatch.setattr(sys, "prefix", str(elsewhere))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    (pages / "04.ipynb").write_text(json.dumps({"note": f"{elsewhere}/lib/model", "own": f"{checkout}/.venv/x"}))
    report.scrub_machine_paths(pages, checkout)
    assert json.loads((pages / "04.ipynb").read_text()) == {"note": "<environment>/lib/model",
                                                             "own": "<checkout>/.venv/x"}
    monkeypatch.setattr(sys, "prefix", "/")  # a system Python: its prefix is no path to hide
    monkeypatch.setattr(sys, "base_prefix", "/")
    (pages / "05.ipynb").write_text(json.dumps({"note": "/usr/lib/model"}))
    report.scrub_machine_paths(pages, checkout)
    assert json.loads((pages / "05.ipynb").read_text()) == {"note": "/usr/lib/model"}


def test_the_paper_report_refuses_a_checkout_with_uncommitted_code(notebooks, tmp_path, monkeypatch, capsys):
    """reports/paper/ names the commit of every run: from a "+dirty" checkout nothing runs, and the error says why."""
    monkeypatch.setattr(report, "git_commit", lambda cwd=None: "abc1234+dirty")
    monkeypatch.setattr(report, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    argv = ["report", "--profile", "paper", "--notebooks-dir", str(notebooks), "--reports-dir", str(tmp_path / "r")]
    assert bab_main(argv) == 2
    assert "commit or stash the changes" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())
