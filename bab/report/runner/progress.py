"""Progress a person can follow, in a terminal and in a log file alike.

A line per notebook with the last report's run time for it as an estimate, then a plain line per
code cell as it starts (papermill's tqdm bar redraws one line with carriage returns: fine in a
terminal, unreadable in a log):

    [3/6] 03_bert_ag_news ... (last run 212 s)
          cell  4/20  0:12  study = BertStudy(P, progress=False)
    [3/6] 03_bert_ag_news ... ok (215.3 s)
"""

import contextlib
import functools
import sys
import time
from pathlib import Path

from bab.report.results.contract import read_json

PROGRESS_ENGINE = "bab-cell-progress"
RESUME_PREFIX = "resuming "  # how bab.core.training.run_training announces a resumed run


def kernel_folder(path) -> dict:
    """papermill arguments that start a notebook's kernel in ``path``. papermill's own ``cwd`` would chdir this whole
    process, which two notebooks running at once in threads would leave in one of their folders."""
    return {"resources": {"metadata": {"path": str(path)}}}


@functools.cache
def progress_engine():
    """Register papermill's nbclient engine with a hook: ``on_cell(cell, index, cells)`` as each cell starts.

    papermill's own progress bar is tqdm, which redraws one line with carriage returns: fine in a
    terminal, unreadable in a log. The hook lets CellProgress print a plain line per code cell instead.
    """
    from papermill.engines import NBClientEngine, papermill_engines

    class CellProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, on_cell=None, **kwargs):
            if on_cell is not None:
                start = nb_man.cell_start

                def cell_start(cell, cell_index=None, **kw):
                    with contextlib.suppress(Exception):  # a progress line never fails a notebook
                        on_cell(cell, cell_index, nb_man.nb.cells)
                    return start(cell, cell_index, **kw)

                nb_man.cell_start = cell_start
                on_complete = getattr(on_cell, "completed", None)
                if on_complete is not None:
                    complete = nb_man.cell_complete

                    def cell_complete(cell, cell_index=None, **kw):
                        with contextlib.suppress(Exception):
                            on_complete(cell)
                        return complete(cell, cell_index, **kw)

                    nb_man.cell_complete = cell_complete
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register(PROGRESS_ENGINE, CellProgressEngine)
    return PROGRESS_ENGINE


def cell_summary(source, width=70):
    """The first line of a cell worth showing (not blank, not an nbval marker), shortened to ``width``."""
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith("# NBVAL_"):
            return line if len(line) <= width else line[: width - 1] + "…"
    return ""


class CellProgress:
    """``on_cell`` callback: one line per code cell as it starts, numbered like the notebook's In [n].

        cell  4/20  0:12  study = BertStudy(P, progress=False)

    (code cell 4 of 20 starts 12 s into the notebook). Plain lines, so a log file stays readable.
    """

    def __init__(self, indent="      ", stream=None):
        self.indent, self.stream = indent, stream
        self.start = time.perf_counter()

    def __call__(self, cell, index, cells):
        if cell.cell_type != "code":
            return
        number = sum(c.cell_type == "code" for c in cells[: index + 1])
        total = sum(c.cell_type == "code" for c in cells)
        elapsed = int(time.perf_counter() - self.start)
        line = f"{self.indent}cell {number:>2}/{total}  {elapsed // 60}:{elapsed % 60:02d}  {cell_summary(cell.source)}"
        print(line.rstrip(), file=self.stream or sys.stdout, flush=True)

    def completed(self, cell):
        """Repeat the lines of a finished cell that say a training run resumed from its checkpoint
        ("resuming gpt2-dense (lm) at step 312/1000"), which the kernel wrote to the notebook only."""
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                for line in output.get("text", "").splitlines():
                    if line.startswith(RESUME_PREFIX):
                        print(f"{self.indent}      {line}", file=self.stream or sys.stdout, flush=True)


def format_seconds(seconds):
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def last_run(reports_dir, profile, stem):
    """The record runs/<stem>.json of the current reports/<profile>/ (the last report), or None."""
    record = read_json(Path(reports_dir) / profile / "runs" / f"{stem}.json")
    if isinstance(record, dict) and isinstance(record.get("seconds"), int | float):
        return record
    return None


def last_run_note(record):
    """The estimate shown for a notebook, e.g. "(last run 212 s)"; says so when that run failed or there was none."""
    if record is None:
        return "(no previous run)"
    if record.get("status") == "ok":
        return f"(last run {format_seconds(record['seconds'])})"
    return f"(last run failed after {format_seconds(record['seconds'])})"


def estimate_line(records, profile):
    """One line before the run: how long the selected notebooks took in the last report."""
    known = [r for r in records if r is not None and r.get("status") == "ok"]
    n = len(records)
    head = f"running {n} notebook{'s' if n != 1 else ''} at profile {profile}"
    if not known:
        return f"{head}; no earlier successful runs to estimate from"
    total = format_seconds(sum(r["seconds"] for r in known))
    if len(known) == n:
        return f"{head}; the last report took {total} for them"
    return f"{head}; the last report took {total} for the {len(known)} of them that ran ok"
