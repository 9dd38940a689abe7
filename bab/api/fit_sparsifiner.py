"""``python -m bab fit sparsifiner``: fit Sparsifiner on an image folder and write what a user needs into one folder.

    out/model/            the ViT with its connectivity predictors (bab.sparsifiner.attach.load_attached(
                          ViTForImageClassification, out/model)); preprocessing.json: its image size, channels,
                          labels and the training images' mean and std
    out/sweep.csv         accuracy and MHSA cost (fraction of dense multiply-adds) per keep rate beside dense
                          attention, each accuracy with its 95% interval and each keep rate's difference from dense
                          with its paired 95% interval, on the test images
    out/accuracy_cost.png accuracy against MHSA cost
    out/metrics.json      all of the above, the recipe, the training history, wall time (strict JSON)
    out/summary.html      a one-page summary of it

As ``fit heads``: every input is checked before training (keep rates, folders, an unseen test label, a non-empty
``out`` without ``overwrite``); each of the three phases goes through the run cache, so an interrupted fit resumes
and a repeated one loads; the folder appears whole or not at all (written beside it, renamed at the end).
"""

from __future__ import annotations

import contextlib
import html
import json
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from bab.api.run_folder import accuracy_cost_figure as shared_figure
from bab.api.run_folder import announce, check_out, summary_page, write_record, write_whole
from bab.api.vit import SparsifinerClassifier
from bab.core.step_clock import clock
from bab.core.threads import apply_threads, describe_threads
from bab.heads.evaluate import interval_columns
from bab.sparsifiner.predictor import validate_keep_rate

FILES = ["model/", "sweep.csv", "accuracy_cost.png", "metrics.json", "summary.html"]


def fit_sparsifiner(train, out, test, keep_rates=(0.5, 0.25, 0.1), image_size: int = 28, patch_size: int = 4,
                    channels: int = 1, model=None, epochs=None, batch_size: int | None = None, seed: int = 13,
                    overwrite: bool = False, progress: bool = True, threads: int | None = None, cache=None,
                    checks=contextlib.nullcontext) -> dict:
    """Fit (dense, phase 1, phase 2), sweep the keep rates on ``test`` and write the folder ``out``; returns the
    metrics record (see the module doc). ``model``: a transformers ViT / DeiT to fine-tune (object, hub id or
    folder) instead of a small ViT from scratch; ``epochs``: (dense, phase 1, phase 2), default the recipe's.
    ``checks``: the context the input checks run in, before any training (the command line passes
    ``bab.core.errors.checking``, so what they refuse is bad input, exit 2)."""
    start = time.perf_counter()
    apply_threads(threads)
    say = print if progress else (lambda *a, **k: None)
    with checks():  # the keep rates, --out, both folders and their labels (images indexed, no model trained)
        keep_rates = [validate_keep_rate(rate) for rate in keep_rates]
        if not keep_rates:
            raise ValueError("give at least one keep rate in (0, 1], e.g. --keep-rates 0.5,0.25,0.1")
        out = Path(out)
        check_out(out, overwrite)
        say(f"[1/4] images: {train}, test {test}")
        clf = SparsifinerClassifier.from_folder(train, image_size=image_size, patch_size=patch_size,
                                                channels=channels, model=model)
        test_data = clf.dataset(test)  # an unseen label fails here, before training
    say(f"      {len(clf.train_set)} training images, {len(test_data)} test images, labels {clf.labels}")
    say(f"[2/4] training on {describe_threads()}: dense -> phase 1 (predictors) -> phase 2 (joint)")
    clf.fit(epochs=epochs, batch_size=batch_size, seed=seed, progress=progress, cache=cache)
    say(f"[3/4] sweep over keep rates {', '.join(f'{r:g}' for r in keep_rates)}")
    sweep = sparsifiner_sweep(clf, test_data, keep_rates)
    c = clf.config
    metrics = {"train": str(train), "test": str(test), "model": "small ViT from scratch" if model is None
               else (str(model) if isinstance(model, (str, Path)) else type(model).__name__),
               "labels": clf.labels, "train_images": len(clf.train_set), "test_images": len(test_data),
               "shape": {"image_size": c.image_size, "patch_size": c.patch_size, "channels": c.num_channels,
                         "layers": c.num_layers, "heads": c.num_heads, "tokens": c.num_tokens},
               "recipe": {"epochs": list(epochs) if epochs else
                          [clf.recipe.dense.epochs, clf.recipe.phase1.epochs, clf.recipe.phase2.epochs],
                          "batch_size": batch_size, "seed": seed, "predictor": asdict(c.connectivity)},
               "keep_rates": keep_rates, "sweep": sweep.to_dict(orient="records"), "history": clf.history,
               "files": FILES}
    say("[4/4] writing " + str(out))

    def write(staging: Path) -> None:
        clf.model.save_pretrained(staging / "model")
        (staging / "model" / "preprocessing.json").write_text(json.dumps({
            "image_size": c.image_size, "channels": c.num_channels, "labels": clf.labels,
            "mean": clf.mean.flatten().tolist(), "std": clf.std.flatten().tolist()}, indent=1))
        sweep.to_csv(staging / "sweep.csv", index=False)
        accuracy_cost_figure(sweep).savefig(staging / "accuracy_cost.png", dpi=120, bbox_inches="tight")
        write_record(staging, metrics, start, headline(sweep), lambda: summary_html(metrics, sweep))

    write_whole(out, write)
    announce(out, metrics)
    return metrics


def sparsifiner_sweep(clf: SparsifinerClassifier, data, keep_rates) -> pd.DataFrame:
    """Dense attention and each keep rate on ``data``: accuracy with its 95% interval, MHSA cost, and each keep
    rate's difference from dense with its paired 95% interval (the same images)."""
    from bab.sparsifiner.evaluate import evaluate_vit

    dense = evaluate_vit(clf.model, data)
    rows = [{"attention": "dense", "keep_rate": None, **_columns(dense, None)}]
    for rate in keep_rates:
        stats = evaluate_vit(clf.model, data, attention="masked", keep_rate=rate)
        rows.append({"attention": "sparsifiner", "keep_rate": rate, **_columns(stats, dense)})
    return pd.DataFrame(rows)


def _columns(stats: dict, dense: dict | None) -> dict:
    return {"accuracy": stats["accuracy"], **interval_columns(stats, dense), "cost": stats["cost"], "n": stats["n"]}


def headline(sweep: pd.DataFrame) -> str:
    dense, sparse = sweep.iloc[0], sweep.iloc[1:]
    parts = [f"dense {dense.accuracy:.1f}% [{dense.accuracy_low:.1f}, {dense.accuracy_high:.1f}]"]
    parts += [f"keep {r.keep_rate:g}: {r.accuracy:.1f}% at cost {r.cost:.2f} ({r.vs_dense:+.1f} points "
              f"[{r.vs_dense_low:+.1f}, {r.vs_dense_high:+.1f}])" for r in sparse.itertuples()]
    return f"on {int(dense.n)} test images: " + "; ".join(parts)


def accuracy_cost_figure(sweep: pd.DataFrame):
    """Each keep rate's accuracy (its interval, the rate beside it) against MHSA cost, dense attention's as a line."""
    sparse = sweep[sweep.attention == "sparsifiner"]
    points = sparse.assign(method="Sparsifiner (keep rates)", label=[f"{rate:g}" for rate in sparse.keep_rate])
    return shared_figure(points, "MHSA cost (fraction of dense multiply-adds)", dense=sweep.iloc[0].accuracy)


def summary_html(metrics: dict, sweep: pd.DataFrame) -> str:
    """A self-contained page (accuracy_cost.png beside it): data, shape, recipe, the sweep with its intervals."""
    shown = sweep[["attention", "keep_rate", "accuracy", "accuracy_low", "accuracy_high", "vs_dense", "vs_dense_low",
                   "vs_dense_high", "cost"]].round(2)
    s, r = metrics["shape"], metrics["recipe"]
    return summary_page("bab fit sparsifiner", "Sparsifiner: fit summary", [
        f"<p>{html.escape(metrics['model'])}: {s['image_size']}x{s['image_size']} images ({s['channels']} "
        f"channel(s)) in {s['patch_size']}x{s['patch_size']} patches, {s['tokens']} tokens, {s['layers']} layers x "
        f"{s['heads']} heads. Trained on <code>{html.escape(metrics['train'])}</code> ({metrics['train_images']} "
        f"images), reported on <code>{html.escape(metrics['test'])}</code> ({metrics['test_images']} images). "
        f"Epochs dense / phase 1 / phase 2: {' / '.join(map(str, r['epochs']))}; wall time "
        f"{clock(metrics['wall_seconds'])}.</p>",
        f"<p>{html.escape(metrics['headline'])}</p>",
        shown.to_html(index=False, border=0, na_rep=""),
        "<p>In brackets, 95% intervals over the test images: an accuracy's is a Wilson score interval; a difference "
        "from dense is paired (both on the same images, resampled together). They carry the sampling of the test "
        "images only, not the spread between training seeds (one model was trained). Cost counts the attention "
        "cores' multiply-adds (the predictor's included) against dense attention's.</p>",
        "<img src='accuracy_cost.png' alt='accuracy against MHSA cost'>"], "img{max-width:100%}")
