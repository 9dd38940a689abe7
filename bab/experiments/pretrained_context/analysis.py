"""Notebook 07's claim, computed: zero-shot accuracy held at the paper's pruning, and the eviction comparison."""

from __future__ import annotations

import pandas as pd

# ---------------------------------------------------------------------------------------------- the claim, computed


def zero_shot_held(points: list[dict], dense: dict[str, dict]) -> list[dict]:
    """Per pruned model: does every zero-shot task's accuracy stay within the dense model's 95% interval?

    ``points``: one dict per (model, task) with ``weights``, ``gamma``, ``task``, ``accuracy`` and
    ``fraction_pruned``; ``dense``: task -> {"ci_low", "ci_high"} of the dense model (all in the same unit).
    Returns one dict per (weights, gamma), sorted by fraction pruned: ``fraction_pruned``, ``held`` and the tasks
    that fell outside (``outside``: task -> accuracy)."""
    models: dict[tuple, dict] = {}
    for p in points:
        if p["task"] not in dense:
            raise ValueError(f"task {p['task']!r} has no dense accuracy to compare with (dense has {sorted(dense)})")
        entry = models.setdefault((p["weights"], p["gamma"]), {"weights": p["weights"], "gamma": p["gamma"],
                                                               "fraction_pruned": p["fraction_pruned"], "outside": {}})
        low, high = dense[p["task"]]["ci_low"], dense[p["task"]]["ci_high"]
        if not low <= p["accuracy"] <= high:
            entry["outside"][p["task"]] = p["accuracy"]
    held = [{**m, "held": not m["outside"]} for m in models.values()]
    return sorted(held, key=lambda m: (m["weights"], m["fraction_pruned"]))


def claim_verdict(held: list[dict], weights: str, target: float = 0.8) -> dict:
    """The paper's claim on the models of ``weights`` (``zero_shot_held``'s rows): the largest fraction pruned at
    which every task holds (``held_at``, its gamma), the smallest at which one does not (``breaks_at``), and whether
    the claim's ``target`` fraction holds (within 0.05)."""
    rows = [h for h in held if h["weights"] == weights]
    if not rows:
        raise ValueError(f"no zero-shot rows for weights {weights!r}; have {sorted({h['weights'] for h in held})}")
    holding = [h for h in rows if h["held"]]
    failing = [h for h in rows if not h["held"]]
    best = max(holding, key=lambda h: h["fraction_pruned"]) if holding else None
    first_break = min(failing, key=lambda h: h["fraction_pruned"]) if failing else None
    return {"weights": weights, "held_at": best["fraction_pruned"] if best else None,
            "gamma": best["gamma"] if best else None,
            "breaks_at": first_break["fraction_pruned"] if first_break else None,
            "breaks_on": dict(first_break["outside"]) if first_break else {},
            "target_holds": bool(best and best["fraction_pruned"] >= target - 0.05)}


def eviction_comparison(learned: pd.DataFrame, dense_eval: dict[str, dict], learned_zero_shot: pd.DataFrame,
                        dense_zero_shot: dict[str, dict], eviction: pd.DataFrame, eviction_zero_shot: pd.DataFrame,
                        bench: pd.DataFrame, gamma: float) -> pd.DataFrame:
    """Dense, the learned pruning at ``gamma`` and each eviction policy side by side, one row each: fraction pruned
    and perplexity per text, zero-shot accuracy per task (%), decode throughput over dense and KV-cache MB at the end
    of generation (from ``bench``, a generation table with rows "dense", "gamma=<gamma>" and the policies' names).

    ``learned``: rows (gamma, text, fraction_pruned, perplexity); ``dense_eval``: {text: evaluate result};
    ``learned_zero_shot``: the learned model's zero-shot rows (task, accuracy in %); ``dense_zero_shot``: {task:
    result, accuracy a fraction}; ``eviction``: rows (policy, text, fraction_pruned, perplexity);
    ``eviction_zero_shot``: rows (policy, task, accuracy a fraction)."""
    texts = list(dense_eval)
    learned_name = f"gamma={gamma:g}"

    def row(name, pruned: dict, perplexity: dict, accuracy: dict, bench_name: str) -> dict:
        out = {"method": name}
        for text in texts:
            out[f"fraction pruned ({text})"] = pruned[text]
            out[f"perplexity ({text})"] = perplexity[text]
        out.update({f"{task} %": value for task, value in accuracy.items()})
        out["decode x dense"] = bench.loc[bench_name, "throughput_ratio"]
        out["KV MB at end"] = bench.loc[bench_name, "cache_mb_end"]
        return out

    at_gamma = learned[learned.gamma == gamma].set_index("text")
    rows = [row("dense", dict.fromkeys(texts, 0.0), {t: dense_eval[t]["perplexity"] for t in texts},
                {task: 100 * r["accuracy"] for task, r in dense_zero_shot.items()}, "dense"),
            row(f"context pruning, {learned_name}", at_gamma.fraction_pruned.to_dict(), at_gamma.perplexity.to_dict(),
                dict(zip(learned_zero_shot.task, learned_zero_shot.accuracy, strict=True)), learned_name)]
    for policy in eviction.policy.unique():
        mine = eviction[eviction.policy == policy].set_index("text")
        tasks = eviction_zero_shot[eviction_zero_shot.policy == policy]
        rows.append(row(policy, mine.fraction_pruned.to_dict(), mine.perplexity.to_dict(),
                        {t: 100 * a for t, a in zip(tasks.task, tasks.accuracy, strict=True)}, policy))
    return pd.DataFrame(rows).set_index("method")
