"""Where a report's seconds went: ``python -m bab report timings --profile quick``.

papermill stores each executed cell's duration in the notebook it writes (``reports/<profile>/<notebook>.ipynb``),
and the notebook's own start and end. Each code cell is put in one kind by what it calls, the first that fits:

    imports      a cell of imports and settings
    training     a study step that trains (or loads from the run cache): dense(), warm_start_budgeted(), pruned(), ...
    benchmark    a timed comparison: latency(), throughput(), bench_*
    evaluation   accuracy, perplexity and sweeps: evaluate*, sweep, retention, zero_shot, budget_table, ...
    figures      plots
    other        the rest (rows, tables, printing)

A cell served from the run cache takes the seconds it took, so a warm report shows what is left to speed up.
The kernel's start is the time from the notebook's start to its first cell's; converting to HTML is not counted.

A cell counts whole under one kind, so a sweep that trains its models first counts as evaluation. Beside the
kinds, two clocks that do not depend on how cells are read, from the notebook's ``results/<notebook>.json``:
``trained`` sums the seconds the training loops of the models this build trained recorded (loaded ones count
nothing), ``measured`` the same for the slow measurements it computed (``Study.measured``: perplexities, zero-shot
scores, eviction, head importance).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pandas as pd

from bab.report.results.contract import read_json

KINDS = {
    "training": r"\.(dense|warm_start_budgeted|warm_start_static|hard_adapted|static_hard_adapted|"
                r"budgeted_from_scratch|predictor|sparsifiner|linformer|budgeted_heads|budgeted_heads_hard|evit|"
                r"evit_sparsifiner|pruned|budget_conditioned|dense_fine_tuned|posthoc_structural|posthoc|"
                r"dense_grid)\(|choose_predictor_preset|paper_recipe_models|recipe_ablation|\bfit\(",
    "benchmark": r"latency|throughput|bench_|generation_table",
    "evaluation": r"evaluat|sweep|retention|zero_shot|budget_table|static_baselines|logit_equality|token_kinds|"
                  r"head_importance|gate_ranking",
    "figures": r"plot|show\(|savefig|heatmap",
}
IMPORT_LINE = re.compile(r"^\s*(import |from \S+ import |#|$|\)|[A-Za-z_]+,\s*$|set_threads|pd\.set_option)")


def kind_of(source: str) -> str:
    """The kind of a code cell by what it calls (``KINDS``, the first that fits), "imports" for a cell of imports
    and settings, else "other"."""
    if all(IMPORT_LINE.match(line) for line in source.splitlines()):
        return "imports"  # before the kinds: "from bab.heads import plots" draws nothing
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    for kind, pattern in KINDS.items():
        if re.search(pattern, code):
            return kind
    return "other"


def cell_timings(path) -> pd.DataFrame:
    """One row per executed code cell of the notebook at ``path``: its position, kind, seconds and first line."""
    notebook = json.loads(Path(path).read_text())
    rows = []
    for i, cell in enumerate(notebook["cells"]):
        run = cell.get("metadata", {}).get("papermill", {})
        if cell["cell_type"] != "code" or run.get("duration") is None:
            continue
        source = "".join(cell["source"])
        first = next((line for line in source.splitlines() if line.strip() and not line.startswith("#")), "")
        rows.append({"cell": i, "kind": kind_of(source), "seconds": float(run["duration"]), "first line": first[:70]})
    return pd.DataFrame(rows, columns=["cell", "kind", "seconds", "first line"])


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def notebook_timings(path) -> dict:
    """The seconds of one executed notebook: in all, the kernel's start, and each kind's sum."""
    notebook = json.loads(Path(path).read_text())
    run = notebook.get("metadata", {}).get("papermill", {})
    cells = cell_timings(path)
    first = next((c["metadata"]["papermill"]["start_time"] for c in notebook["cells"]
                  if c.get("metadata", {}).get("papermill", {}).get("start_time")), None)
    start = (_when(first) - _when(run["start_time"])).total_seconds() if first and run.get("start_time") else None
    by_kind = cells.groupby("kind")["seconds"].sum()
    stem = Path(path).stem
    return {"notebook": stem, "in all": run.get("duration"), "kernel start": start,
            **{kind: float(by_kind.get(kind, 0.0)) for kind in (*KINDS, "imports", "other")},
            **own_clocks(Path(path).parent / "results" / f"{stem}.json")}


def own_clocks(results_path, cached: bool = False) -> dict:
    """``{"trained": s, "measured": s}``: the seconds the models and measurements a notebook's results file lists
    as made in its run (or, with ``cached``, as loaded from the run cache: made by an earlier process) recorded
    themselves; NaN without a readable results file."""
    results = read_json(results_path)
    if results is None:
        return {"trained": float("nan"), "measured": float("nan")}

    def made_here(entries: list[dict], seconds: str) -> float:
        return sum(float(entry[seconds] or 0.0) for entry in entries if entry["cached"] == cached)

    return {"trained": made_here(results.get("models", []), "train_seconds"),
            "measured": made_here(results.get("measurements", []), "seconds")}


def report_timings(folder) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per executed notebook of the report ``folder`` with its seconds by kind, and a total row; the
    slowest cells of all, with their notebook). FileNotFoundError when the folder holds no executed notebook."""
    paths = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"{folder} holds no executed notebook (NN_*.ipynb); build the report first "
                                f"(./run_all.sh or python -m bab report run --profile <name>)")
    table = pd.DataFrame([notebook_timings(p) for p in paths]).set_index("notebook")
    table.loc["all notebooks"] = table.sum(numeric_only=True, min_count=1)
    cells = pd.concat([cell_timings(p).assign(notebook=p.stem) for p in paths], ignore_index=True)
    slowest = cells.sort_values("seconds", ascending=False).head(15)[["notebook", "cell", "kind", "seconds",
                                                                      "first line"]]
    return table, slowest
