"""The papers' reported numbers, as data, taken from their tables and text (each paper is cited in docs/).

Every comparison table in the notebooks and the report joins our measured rows to these on
(experiment, method, budget). Nothing else in the package types a paper number.
Accuracy in %, cost as a fraction of dense attention, speed-up as dense time / our time.
"""

from __future__ import annotations

import pandas as pd

# a row's identity: its experiment, its method (declared in bab.experiments.methods), its budget and its settings
# as canonical text (``settings_text``: "token_keep=0.7"; empty for a method without settings)
KEYS = ("experiment", "method", "budget", "settings")
OPTIONAL_COLUMNS = ("perplexity", "memory_ratio", "value")  # language-model rows; a method's one other number


def _row(experiment, method, budget, cost=None, accuracy=None, speedup=None, note="", perplexity=None,
         memory_ratio=None, settings=None, value=None):
    row = {"experiment": experiment, "method": method, "budget": budget, "cost": cost,
           "accuracy": accuracy, "speedup": speedup, "note": note}
    if settings:
        row["settings"] = dict(settings)
    if perplexity is not None or memory_ratio is not None:  # language-model rows only
        row.update(perplexity=perplexity, memory_ratio=memory_ratio)
    if value is not None:  # what it holds: the method's `value` (bab.experiments.methods)
        row["value"] = value
    return row


def _points(experiment, method, *points):
    """One row of ``method`` per (budget, cost, accuracy) point of a paper's table."""
    return [_row(experiment, method, *point) for point in points]


BUDGETED_ATTENTION = [
    # Section 6.1-6.2, Table 1 and Figure 1 (synthetic marked-token task, length 64)
    _row("synthetic", "dense", 1.00, 1.000, 99.4, note="mean of 3 data x 3 optimisation seeds"),
    _row("synthetic", "budgeted from scratch", 0.50, None, 85.1, note="one seed collapsed"),
    _row("synthetic", "warm-start budgeted", 0.25, 0.303, 99.7),
    _row("synthetic", "warm-start budgeted", 0.50, 0.504, 100.0),
    _row("synthetic", "warm-start static", 0.25, 0.358, 100.0),
    _row("synthetic", "warm-start static", 0.50, 0.476, 100.0),
    _row("synthetic", "budgeted sweep, lowest point", 0.10, 0.157, 91.8),
    # Section 6.3 (custom word-level transformer, AG News held-out test)
    _row("ag_news_custom", "dense", 1.00, 1.000, 84.00),
    _row("ag_news_custom", "warm-start budgeted", 0.50, 0.503, 83.47),
    _row("ag_news_custom", "warm-start budgeted", 0.75, 0.680, 83.87),
    _row("ag_news_custom", "warm-start static", 0.25, 0.259, 84.52),
    _row("ag_news_custom", "warm-start static", 0.50, 0.529, 84.37),
    _row("ag_news_custom", "hard skip, no adaptation", 0.50, 0.500, 74.8),
    _row("ag_news_custom", "budgeted soft (latency)", 0.50, 0.509, None, 0.93),
    _row("ag_news_custom", "budgeted hard skip, adapted", 0.50, 0.500, 82.1, 1.28),
    _row("ag_news_custom", "budgeted hard skip, adapted", 0.75, 0.750, 83.9, 1.09),
    _row("ag_news_custom", "static hard skip", 0.50, 0.500, 82.8, 1.25),
    # Pretrained BERT encoders
    _row("bert_tiny_ag_news", "dense", 1.00, 1.000, 85.7, note="4 epochs"),
    _row("bert_tiny_ag_news", "budgeted hard-adapted, structural", 0.50, 0.500, 84.5, 1.45,
         note="1348.9 -> 924.6 ms"),
    _row("bert_mini_ag_news", "dense", 1.00, 1.000, 87.2),
    *_points("bert_mini_ag_news", "budgeted hard-adapted", (0.25, 0.250, 87.2), (0.50, 0.500, 87.6),
             (0.75, 0.750, 87.4)),
    _row("bert_mini_ag_news", "static hard specialist", 0.50, 0.500, 86.7),
    *_points("bert_mini_ag_news", "soft sweep", (0.10, 0.194, 84.2), (0.50, 0.498, 86.9), (1.00, 0.998, 87.1)),
    _row("bert_mini_ag_news", "budgeted structural", 0.50, 0.500, 87.6, 1.20, note="4644.5 -> 3892.9 ms"),
    _row("bert_mini_ag_news", "dense post-hoc structural", 0.50, 0.500, 86.1, 1.20),
    _row("bert_mini_ag_news", "dense post-hoc + recovery", 0.50, None, 87.9, 1.24),
    _row("bert_mini_ag_news", "dense post-hoc + recovery", 0.75, None, 88.1, 1.12),
    # Section 6.5: the gate ranking (Spearman, mean over seeds) and the compute that structural pruning removes
    _row("bert_mini_ag_news", "gate ranking", None, value=0.91, note="Spearman at b = 0.25 vs 0.75, +- 0.01"),
    _row("bert_mini_ag_news", "compute, structural", 0.50, value=19.2, settings={"model": "BERT-Mini shape"},
         note="of transformer-layer MACs at length 128; 4.7% of parameters"),
    _row("bert_mini_dbpedia14", "dense", 1.00, 1.000, 96.6),
    *_points("bert_mini_dbpedia14", "budgeted hard-adapted", (0.50, 0.500, 97.4), (0.75, 0.750, 97.5)),
    *_points("bert_mini_dbpedia14", "soft sweep", (0.10, 0.226, 94.6), (0.50, 0.503, 97.0), (1.00, 0.995, 97.6)),
    _row("bert_mini_dbpedia14", "gate ranking", None, value=0.84, note="Spearman at b = 0.25 vs 0.75, +- 0.04"),
    _row("distilbert_ag_news", "dense", 1.00, 1.000, 86.5),
    _row("distilbert_ag_news", "dense continued", 1.00, 1.000, 87.4),
    _row("distilbert_ag_news", "warm-start budgeted", 0.50, 0.500, 88.1),
    _row("distilbert_ag_news", "warm-start budgeted", 0.75, 0.682, 88.4),
    _row("distilbert_ag_news", "dense post-hoc", 0.75, 0.750, 88.0),
]

# Section 6.2: budgeted gates trained from scratch were seed-sensitive, "one seed collapsed" of the three
# (85.1% mean at b = 0.5, the row above)
SCRATCH_SEEDS_COLLAPSED = (1, 3)  # (collapsed, seeds run)

# Sparsifiner (CVPR 2023) on ImageNet, DeiT-S (197 tokens): budget = attention keep rate, cost = MHSA FLOPs
# relative to DeiT-S's 357.7 MFLOPs (QK^T and AV multiply-adds over 12 layers), accuracy = top-1.
_DEIT_S_MHSA_MFLOPS = 357.7
SPARSIFINER_KEEP_RATE_SWEEP = [  # Table 2: (keep rate, MHSA MFLOPs, top-1)
    (1.0, 357.7, 79.82), (0.9, 396.8, 80.02), (0.8, 360.6, 79.97), (0.7, 324.6, 79.96), (0.6, 290.3, 79.98),
    (0.5, 254.2, 79.94), (0.4, 218.0, 79.92), (0.3, 183.6, 79.83), (0.2, 147.5, 79.71), (0.1, 111.4, 79.42),
    (0.05, 93.3, 78.75), (0.01, 78.9, 73.03),
]
SPARSIFINER = [
    _row("vit_sparsifiner", "dense", 1.00, 1.000, 79.82, note="DeiT-S, ImageNet top-1 (Table 2)"),
    *[_row("vit_sparsifiner", "sparsifiner", rate, round(mflops / _DEIT_S_MHSA_MFLOPS, 4), top1,
           note=f"Table 2: {mflops} MHSA MFLOPs")
      for rate, mflops, top1 in SPARSIFINER_KEEP_RATE_SWEEP if rate < 1.0],
    # Table 1 (DeiT-S): token pruning at fixed layers (budget = token keep rate), and combined with Sparsifiner
    # at attention keep rate 0.25 (budget = attention keep rate; the token keep rate is in the method name).
    # The paper's models were trained with their tokens pruned, so the same numbers stand beside our fine-tuned
    # rows too, as well as beside the rows that prune without training
    *[row for evit, combo in (("token pruning (EViT)", "EViT + sparsifiner"),
                              ("token pruning (EViT), fine-tuned", "EViT + sparsifiner, fine-tuned"))
      for row in (
          _row("vit_sparsifiner", evit, 0.70, round(193.1 / _DEIT_S_MHSA_MFLOPS, 4), 79.5),
          _row("vit_sparsifiner", evit, 0.50, round(149.1 / _DEIT_S_MHSA_MFLOPS, 4), 78.5),
          _row("vit_sparsifiner", combo, 0.25, round(113.3 / _DEIT_S_MHSA_MFLOPS, 4), 79.5,
               note="Sparsif-EViT", settings={"token_keep": 0.7}),
          _row("vit_sparsifiner", combo, 0.25, round(86.6 / _DEIT_S_MHSA_MFLOPS, 4), 78.7,
               note="Sparsif-EViT", settings={"token_keep": 0.5}))],
    # Table 4: Linformer with its reduced dimension equal to Sparsifiner's budget, trained identically
    _row("vit_sparsifiner", "linformer (equal budget)", None, round(246.73 / _DEIT_S_MHSA_MFLOPS, 4), 77.54,
         note="Table 4; keep rate not stated; Sparsifiner-S there: 224.04 MFLOPs, 79.79"),
]

# Dynamic Context Pruning (arXiv 2305.15805; docs/context-pruning.md). The text we have
# states the headline claims only, without a perplexity table: GPT-2 fine-tuned with up to 80% of the
# context pruned "without significant performance degradation", and "up to 2x" inference throughput
# from removing dropped tokens from the KV cache. Cost = fraction of context kept; budget = the keep
# fraction the row is about (0.20 = 80% pruned).
# The same claim sits beside notebook 06 (a small GPT-2 trained here) and notebook 07 (pretrained SmolLM2-135M
# fine-tuned, the closer counterpart of the paper's setting).
CONTEXT_PRUNING = [
    _row(experiment, "context pruning, ~80% of context pruned", 0.20, cost=0.20, speedup=2.0,
         note="GPT-2 fine-tuned, r = 64; perplexity: 'without significant degradation' (no number in our text); "
              "throughput 'up to 2x' (reference implementation, contexts up to 1024)")
    for experiment in ("gpt2_context_pruning", "pretrained_context_pruning")
]


PAPER_RESULTS = BUDGETED_ATTENTION + SPARSIFINER + CONTEXT_PRUNING

# Our experiment -> the paper's experiment it reproduces, when the names differ because the model
# does (offline we fine-tune the packaged 6 x 12-head MiniLM where the paper used BERT-Mini; the
# rows' notes name the model that was actually used).
COUNTERPARTS = {"bert_ag_news": "bert_mini_ag_news", "bert_dbpedia14": "bert_mini_dbpedia14"}
# The papers' experiments with no run of ours (BERT-Tiny's latency row: hub only).
NOT_RUN_HERE = ("bert_tiny_ag_news",)


def check_paper_rows(rows=None) -> None:
    """Every paper row names a method our counterpart experiment declares, with a budget and settings that fit
    it, and no two rows share a key: a row the report could never join fails here, not as an empty cell."""
    from bab.experiments.methods import method_of

    ours_of = {paper_name: ours for ours, paper_name in COUNTERPARTS.items()}
    seen = set()
    for i, row in enumerate(PAPER_RESULTS if rows is None else rows):
        key = tuple(_keyed(row)[k] for k in KEYS)
        if key in seen:
            raise ValueError(f"paper row {i}: key {key} repeats")
        seen.add(key)
        if row["experiment"] in NOT_RUN_HERE:
            continue
        try:
            method = method_of(ours_of.get(row["experiment"], row["experiment"]), row["method"])
            method.check_budget(row["budget"])
            method.check_settings(row.get("settings"))
        except ValueError as exc:
            raise ValueError(f"paper row {i} ({row['experiment']}, {row['method']}): {exc}") from None


def paper_frame(experiment: str | None = None) -> pd.DataFrame:
    frame = pd.DataFrame(PAPER_RESULTS)
    return frame if experiment is None else frame[frame.experiment == experiment].reset_index(drop=True)


def _keyed(row: dict) -> dict:
    """``row`` with its settings as canonical text, the form the join key holds."""
    from bab.experiments.methods import settings_text

    return {**row, "settings": settings_text(row.get("settings"))}


# how each row of ours was obtained: the seeds it averages (with the accuracy's sample std over them), the commits
# that trained its models and how many of them came from the run cache (bab.report.results.contract.with_provenance)
SETUP_COLUMNS = ("seeds", "± std", "trained at", "from cache")


def _setup(row: dict) -> dict:
    runs, seeds = row.get("runs") or [], row.get("seeds") or []
    hits = row.get("cache_hits")
    return {"seeds": ", ".join(str(s) for s in seeds) or None, "± std": row.get("accuracy_std"),
            "trained at": ", ".join(c or "not recorded" for c in row.get("trained_at") or []) or None,
            "from cache": None if hits is None else f"{hits} of {len(runs)}"}


def comparison_table(rows, experiments=None) -> pd.DataFrame:
    """Our result rows beside the paper's, joined on (experiment, method, budget, settings).

    Keeps every row of ours and every paper row of the experiments we ran (or ``experiments``),
    so a paper number we did not reproduce shows up as a gap rather than disappearing. ``vs dense`` is each
    side's accuracy minus its own dense model's (points): the like-for-like comparison of a method's cost in
    accuracy, where the levels themselves come from different models and data.
    """
    ours = pd.DataFrame([{**_keyed(r), **_setup(r)} for r in rows],
                        columns=[*KEYS, "cost", "accuracy", "speedup", *OPTIONAL_COLUMNS, "note", *SETUP_COLUMNS])
    ours["experiment"] = ours["experiment"].map(lambda name: COUNTERPARTS.get(name, name))
    ours = ours.rename(columns={"note": "note (ours)"})
    if experiments is None:
        experiments = sorted(set(ours.experiment))
    paper = pd.DataFrame([_keyed(r) for r in PAPER_RESULTS])
    paper = paper.reindex(columns=[*KEYS, "cost", "accuracy", "speedup", *OPTIONAL_COLUMNS])
    paper = paper[paper.experiment.isin(list(experiments))]
    for frame in (ours, paper):
        frame["budget"] = frame["budget"].astype(float).round(4)
    table = paper.merge(ours, on=list(KEYS), how="outer", suffixes=(" (paper)", " (ours)"))
    # like for like: each side's accuracy against its own dense model, never our level against the paper's
    for side in ("paper", "ours"):
        frame = table[(table.method == "dense") & table[f"accuracy ({side})"].notna()]
        dense = frame.drop_duplicates("experiment").set_index("experiment")[f"accuracy ({side})"]
        table[f"vs dense ({side})"] = table[f"accuracy ({side})"] - table.experiment.map(dense)
    columns = [*KEYS, "cost (paper)", "cost (ours)", "accuracy (paper)", "accuracy (ours)", "vs dense (paper)",
               "vs dense (ours)", "speedup (paper)", "speedup (ours)"]
    for name in OPTIONAL_COLUMNS:  # shown only where some row has them (all-empty columns are dropped below)
        columns += [f"{name} (paper)", f"{name} (ours)"]
    columns += ["note (ours)", *SETUP_COLUMNS]
    order = {name: i for i, name in enumerate(dict.fromkeys(list(paper.experiment) + list(ours.experiment)))}
    table = table[columns].sort_values(
        ["experiment", "method", "budget"], key=lambda s: s.map(order) if s.name == "experiment" else s
    )
    if (table["settings"].fillna("") == "").all():
        table = table.drop(columns="settings")
    return table.dropna(axis=1, how="all").reset_index(drop=True)
