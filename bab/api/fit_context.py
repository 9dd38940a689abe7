"""``python -m bab fit context``: fine-tune a decoder with dynamic context pruning on a text file and write what a
user needs into one folder.

    out/model/            the decoder with its interaction modules and its tokenizer
                          (bab.context.attach.load_attached(AutoModelForCausalLM, out/model))
    out/evaluation.csv    held-out perplexity of the decoder as given, of the fitted one with pruning off, and with
                          pruning on (the fraction of context it drops); each ratio to the decoder as given and to the
                          fitted one without pruning with its paired 95% interval over the held-out windows
    out/sample.txt        a greedy continuation of --prompt by model.generate() with a cache that drops tokens
    out/metrics.json      all of the above, the training config and history, wall time (strict JSON)
    out/summary.html      a one-page summary of it

As ``fit heads``: every input is checked before training (files, token counts, a non-empty ``out`` without
``overwrite``); the fit goes through the run cache (a killed fit continues where it stopped when run again the
same way, a repeated one loads); the folder appears whole or not at all (written beside it, renamed at the end).
"""

from __future__ import annotations

import contextlib
import html
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from bab.api.context import ContextPruner
from bab.api.run_folder import announce, check_out, summary_page, write_record, write_whole
from bab.core.statistics import perplexity_ratio
from bab.core.step_clock import clock
from bab.core.threads import apply_threads, describe_threads

FILES = ["model/", "evaluation.csv", "sample.txt", "metrics.json", "summary.html"]


def fit_context(train, out, test, model=None, steps: int = 200, gamma: float = 0.1, context: int = 128,
                r: int = 64, prompt: str | None = None, max_windows: int | None = None, overwrite: bool = False,
                progress: bool = True, threads: int | None = None, checks=contextlib.nullcontext, **overrides) -> dict:
    """Fine-tune ``model`` (``ContextPruner.from_pretrained``'s sources; default the packaged SmolLM2) on the text
    file ``train`` with context pruning at ``gamma``, evaluate on ``test`` and write the folder ``out``; returns the
    metrics record (see the module doc). ``overrides`` change the training config (lr=, batch_size=, seed= ...).
    ``checks``: the context the input checks run in, before any training (the command line passes
    ``bab.core.errors.checking``, so what they refuse is bad input, exit 2)."""
    start = time.perf_counter()
    apply_threads(threads)
    say = print if progress else (lambda *a, **k: None)
    out = Path(out)
    with checks():  # --out, both files, the decoder, and that each text fills a window
        check_out(out, overwrite)
        for name, path in (("--train", train), ("--test", test)):
            if not Path(path).is_file():
                raise FileNotFoundError(f"{name} {path} is not a file; give a text file (.txt) to {name}")
        say(f"[1/5] decoder {model or 'the packaged SmolLM2-135M'}")
        pruner = ContextPruner.from_pretrained(model, r=r, context=context)
        held_out = pruner.token_ids(Path(test))  # too short a text fails here, before training
        pruner.token_ids(Path(train))
    say(f"[2/5] held-out text: {len(held_out):,} tokens; the decoder as given")
    given = _evaluate(pruner, held_out, max_windows, prune=False)  # before the fit changes its weights
    say(f"[3/5] fine-tuning on {describe_threads()}: {steps} steps, gamma {gamma:g}, context {context}")
    pruner.fit(Path(train), steps=steps, gamma=gamma, progress=progress, **overrides)
    say("[4/5] evaluating the fitted decoder with pruning off and on")
    fitted_dense = _evaluate(pruner, held_out, max_windows, prune=False)
    pruned = _evaluate(pruner, held_out, max_windows, prune=True)
    table = evaluation_table(given, fitted_dense, pruned)
    prompt = prompt or " ".join(Path(test).read_text().split()[:context // 2])
    sample = pruner.generate(prompt, max_new_tokens=min(32, context // 2))
    metrics = {"train": str(train), "test": str(test), "model": str(model or "packaged SmolLM2-135M"),
               "decoder": type(pruner.model).__name__, "held_out_tokens": int(len(held_out)),
               "train_config": asdict(pruner.config), "history": pruner.history,
               "evaluation": table.to_dict(orient="records"), "prompt": prompt, "sample": sample, "files": FILES}
    say("[5/5] writing " + str(out))

    def write(staging: Path) -> None:
        pruner.model.save_pretrained(staging / "model")
        pruner.tokenizer.save_pretrained(staging / "model")
        table.to_csv(staging / "evaluation.csv", index=False)
        (staging / "sample.txt").write_text(f"{prompt}\n---\n{sample}\n")
        write_record(staging, metrics, start, headline(table), lambda: summary_html(metrics, table))

    write_whole(out, write)
    announce(out, metrics)
    return metrics


def _evaluate(pruner: ContextPruner, ids, max_windows, prune: bool) -> dict:
    from bab.context.evaluate import evaluate_lm

    return evaluate_lm(pruner.model, ids, pruner.config.context, prune=prune, max_windows=max_windows)


def evaluation_table(given: dict, fitted_dense: dict, pruned: dict) -> pd.DataFrame:
    """One row per model on the held-out windows: perplexity, fraction of context pruned, and its perplexity ratio
    to the decoder as given and to the fitted one without pruning, each with its paired 95% interval."""
    rows = []
    for name, result in (("as given", given), ("fitted, pruning off", fitted_dense), ("fitted, pruning on", pruned)):
        row = {"model": name, "perplexity": result["perplexity"], "fraction_pruned": result["fraction_pruned"],
               "windows": result["windows"]}
        for reference_name, reference in (("given", given), ("fitted_dense", fitted_dense)):
            ratio = perplexity_ratio(result["window_nll"], reference["window_nll"], result["window_tokens"])
            row.update({f"ratio_to_{reference_name}": ratio.value, f"ratio_to_{reference_name}_low": ratio.low,
                        f"ratio_to_{reference_name}_high": ratio.high})
        rows.append(row)
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame) -> str:
    pruned = table.iloc[2]
    return (f"held-out perplexity {table.iloc[0].perplexity:.2f} as given, {table.iloc[1].perplexity:.2f} fitted, "
            f"{pruned.perplexity:.2f} fitted with {100 * pruned.fraction_pruned:.0f}% of the context pruned "
            f"({pruned.ratio_to_fitted_dense:.3f}x [{pruned.ratio_to_fitted_dense_low:.3f}, "
            f"{pruned.ratio_to_fitted_dense_high:.3f}] the fitted decoder without pruning, over "
            f"{int(pruned.windows)} windows)")


def summary_html(metrics: dict, table: pd.DataFrame) -> str:
    c = metrics["train_config"]
    return summary_page("bab fit context", "Dynamic context pruning: fit summary", [
        f"<p>{html.escape(metrics['decoder'])} from {html.escape(metrics['model'])}, fine-tuned on "
        f"<code>{html.escape(metrics['train'])}</code> for {c['steps']} steps (gamma {c['gamma']:g}, context "
        f"{c['context']}), evaluated on <code>{html.escape(metrics['test'])}</code> ({metrics['held_out_tokens']:,} "
        f"tokens); wall time {clock(metrics['wall_seconds'])}.</p>",
        f"<p>{html.escape(metrics['headline'])}</p>",
        table.round(4).to_html(index=False, border=0),
        "<p>Ratios are perplexity over the reference's on the same held-out windows, with paired 95% bootstrap "
        "intervals over the windows; they carry the sampling of the held-out text only (one fine-tune).</p>",
        f"<h2>A continuation with a cache that drops tokens</h2><pre>{html.escape(metrics['prompt'])}\n---\n"
        f"{html.escape(metrics['sample'])}</pre>"])
