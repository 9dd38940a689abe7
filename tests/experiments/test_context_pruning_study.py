"""Notebook 06's orchestration on a tiny text and model: every step runs, and the run cache is reused."""

import json
from dataclasses import replace

import pandas as pd
import pytest

from bab.context.attach import token_drop_times
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache
from bab.data.lm import LMDataConfig
from bab.experiments.context_pruning import (
    ContextPruningProfile,
    ContextPruningStudy,
    closest_to,
    interpolate_specialists,
)
from bab.experiments.profiles import get_profile

TEXT = [f"On day {i}, Elizabeth walked to Netherfield, and Mr. Darcy said nothing of the weather." for i in range(300)]


@pytest.fixture
def tiny_study(tmp_path, monkeypatch):
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "austen.txt").write_text("\n".join(TEXT) + "\n")
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    train = LMTrainConfig(steps=4, batch_size=4, context=32)
    profile = ContextPruningProfile(
        name="tiny", data=LMDataConfig(files=("austen.txt",), vocab_size=300, block_lines=20),
        model=dict(n_positions=96, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
        dense=train, finetune=replace(train, objective="context_pruning"),
        budgeted=replace(train, objective="budget_context"), gammas=(0.1, 1.0), r=8, budgets=(0.2, 0.6),
        eval_windows=4, bench_batch=2, bench_prompts=(64,), bench_new_tokens=4, bench_repeats=1, bench_warmup=0,
        view_tokens=16)
    return lambda **options: ContextPruningStudy(profile, cache=RunCache(tmp_path / "runs"), progress=False, **options)


def test_every_step_runs_and_the_cache_is_reused(tiny_study):
    study = tiny_study()
    dense, metrics = study.dense()
    assert metrics["cached"] is False and study.evaluate(dense, prune=False)["fraction_pruned"] == 0.0
    model, _ = study.pruned(1.0)
    result = study.evaluate(model)
    assert 0.0 <= result["fraction_pruned"] <= 1.0 and result["perplexity"] > 1.0
    budget_model, _ = study.budget_conditioned()
    assert study.evaluate(budget_model, budget=0.2)["windows"] == 4
    for ablation in (study.pruned(1.0, r=4)[0], study.pruned(1.0, irreversible=False)[0]):
        assert study.evaluate(ablation)["perplexity"] > 1.0
    table = study.throughput({"g1": model, "budget 0.2": (budget_model, 0.2)}, prompt_len=64)
    assert list(table.index) == ["dense", "dense, DynamicCache", "g1", "budget 0.2"]
    kinds = study.token_kinds(model)
    assert set(kinds.index) == {"punctuation", "stop word", "other"}
    assert token_drop_times(model, study.passage()).shape == (2, 1, 16)
    # a second study with the same profile trains nothing
    again = tiny_study()
    assert again.dense()[1]["cached"] and again.pruned(1.0)[1]["cached"] and again.budget_conditioned()[1]["cached"]


def test_a_seed_is_every_training_s_seed_and_names_its_own_runs(tiny_study):
    import torch

    unseeded, seeded = tiny_study(), tiny_study(seed=7)
    assert {getattr(unseeded.profile, phase).seed for phase in ("dense", "finetune", "budgeted")} == {0}
    assert {getattr(seeded.profile, phase).seed for phase in ("dense", "finetune", "budgeted")} == {7}
    first, _ = unseeded.dense()
    other, metrics = seeded.dense()
    assert not metrics.get("cached")  # seed 7 is another run, not the unseeded one read back
    assert not torch.equal(first.transformer.wte.weight, other.transformer.wte.weight)
    again, metrics = tiny_study(seed=7).dense()
    assert metrics.get("cached") and torch.equal(again.transformer.wte.weight, other.transformer.wte.weight)


def test_train_06_stores_a_seed_s_runs_under_the_keys_its_notebook_asks_for(tiny_study, tmp_path, monkeypatch,
                                                                            capsys):
    from bab.__main__ import main
    from bab.core.runs import run_of
    from bab.experiments import profiles

    profile = replace(tiny_study().profile, r_ablation=(4,), target_pruned=0.5)
    monkeypatch.setattr(profiles, "get_profile", lambda experiment, name: profile)
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BAB_THREADS", "1")
    assert main(["train", "06", "--profile", "smoke", "--seed", "7", "gamma-1", "ablations", "gamma-1-static"]) == 0
    out = capsys.readouterr().out
    assert "seed 7" in out and "gamma=1: trained" in out and "r=4 at the gamma closest to 50% pruned: trained" in out
    notebook = ContextPruningStudy(profile, cache=RunCache(tmp_path / "runs"), progress=False, seed=7)
    assert notebook.dense()[1]["cached"] and notebook.pruned(1.0)[1]["cached"]
    assert notebook.pruned(0.1)[1]["cached"]  # the ablation's gamma is found by evaluating every specialist
    fraction = notebook.evaluate(notebook.pruned(1.0)[0])["fraction_pruned"]
    _, static_models = notebook.static_fine_tuned_baselines({1.0: fraction})
    for (kind, _), model in static_models.items():
        ahead, metrics = notebook.static_fine_tuned_for(1.0, kind)
        assert metrics["cached"] and run_of(ahead) == run_of(model)
    unseeded = ContextPruningStudy(profile, cache=RunCache(tmp_path / "runs"), progress=False)
    assert not unseeded.dense()[1].get("cached")  # another seed's runs are not these


def test_bad_base_and_prompt_raise(tiny_study):
    study = tiny_study()
    with pytest.raises(ValueError, match="base must be"):
        ContextPruningStudy(study.profile, base="llama")
    with pytest.raises(ValueError, match="too short"):
        study.long_prompt(10_000, 2)


def test_selection_helpers():
    import pandas as pd

    pareto = pd.DataFrame({"gamma": [0.01, 0.1, 1.0], "fraction_pruned": [0.5, 0.78, 0.95],
                           "perplexity": [100.0, 110.0, 130.0]})
    assert closest_to(pareto, "fraction_pruned", 0.8).gamma == 0.1
    assert interpolate_specialists(pareto, 0.865) == pytest.approx(120.0)
    assert interpolate_specialists(pareto, 0.2) != interpolate_specialists(pareto, 0.2)  # NaN outside the range


def test_notebook_profiles_are_registered():
    quick = get_profile("gpt2_context_pruning", "quick")
    paper = get_profile("gpt2_context_pruning", "paper")
    assert max(quick.bench_prompts) >= 512 and quick.r == 64
    assert paper.r_ablation == (32, 64, 128) and paper.irreversibility_ablation


def test_budget_calibration_finds_the_smallest_budget_that_keeps_the_target(tiny_study):
    """Bisection against a brute-force scan of the kept fraction over 161 budgets (logit -8 .. 8)."""
    import torch

    from bab.context.evaluate import evaluate_lm

    study = tiny_study()
    model, _ = study.budget_conditioned()
    ids = study.build().train_ids

    def kept(budget):
        return 1 - evaluate_lm(model, ids, study.eval_context, budget=budget, max_windows=4)["fraction_pruned"]

    scan = [kept(float(torch.sigmoid(torch.tensor(x / 10)))) for x in range(-80, 81)]
    assert all(a <= b + 1e-9 for a, b in zip(scan, scan[1:], strict=False))  # monotone in the budget
    for target in (0.3, 0.6):
        got = kept(study.calibrate_budget(model, target, windows=4, steps=24))
        below = [k for k in scan if k < target]
        above = [k for k in scan if k >= target]
        assert (max(below) if below else 0.0) - 1e-9 <= got <= (min(above) if above else 1.0) + 1e-9
    table = study.budget_table(model, (0.3,))
    assert list(table.columns[:3]) == ["budget", "kept (raw)", "perplexity (raw)"] and "passed budget" in table
    # the windows of the calibrated evaluation the row reports, kept beside the columns for its result row
    windows = table.attrs["windows"][0.3]
    assert len(windows["window_nll"]) == len(windows["window_tokens"]) == study.profile.eval_windows
    assert "window_nll" not in table
    reported = study.evaluate(model, budget=float(table.loc[0, "passed budget"]))
    assert windows["window_nll"] == reported["window_nll"] and table.loc[0, "perplexity"] == reported["perplexity"]


def test_the_headline_row_records_its_windows_and_paired_repeats(tiny_study):
    """The rows the claims judge get their units: per-window log-likelihoods from evaluate, per-repeat decode times
    from the generation table, and the claims' intervals are built from them."""
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from bab.context.attach import attach
    from bab.context.bench import generation_table, repeat_times
    from bab.context.evaluate import evaluate_lm
    from bab.context.interaction import PruningConfig
    from bab.report.claims import Evidence

    study = tiny_study()
    torch.manual_seed(0)
    model = attach(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=64, n_embd=16, n_layer=2, n_head=2)),
                   PruningConfig(r=8, init_std=0.5, init_bias=1.0)).eval()
    ids = torch.randint(0, 50, (6 * 16 + 1,))
    dense_eval = evaluate_lm(model, ids, 16, prune=False)
    pruned_eval = evaluate_lm(model, ids, 16)
    table = generation_table({"dense": (model, {"prune": False}), "pruned": (model, {"prune": True})},
                             ids[:48].view(2, 24), new_tokens=4, warmup=0, repeats=3)
    M = study.methods
    dense = study.result_row(M.dense, 1.0, dense_eval, speedup=1.0, models=())
    headline = study.result_row(M.headline, 0.2, {**pruned_eval, **repeat_times(table, "pruned")},
                                speedup=table.loc["pruned", "throughput_ratio"], models=())
    kept = study.ledger.outcomes_for([headline])
    kinds = {json.loads(key)[-1] for key in kept}
    assert kinds == {"window_nll", "window_tokens", "unit_ids", "dense_ms", "ms"}
    dense_kinds = {json.loads(key)[-1] for key in study.ledger.outcomes_for([dense])}
    assert dense_kinds == {"window_nll", "window_tokens", "unit_ids"}
    evidence = Evidence(outcomes=study.ledger.outcomes_for([dense, headline]))
    ratio = evidence.perplexity_ratio(headline, dense)
    assert ratio.value == pytest.approx(headline["perplexity"] / dense["perplexity"], rel=1e-6)
    assert ratio.low <= ratio.value <= ratio.high
    speed = evidence.speedup(headline)
    assert speed.value == pytest.approx(headline["speedup"], rel=1e-12)
    assert np.isfinite([speed.low, speed.high]).all()


def test_a_measurement_stored_before_windows_were_kept_gives_none_not_nan(tiny_study, monkeypatch):
    import pandas as pd
    import torch

    study = tiny_study()
    old = {"perplexity": 9.0, "val_ce": 2.2, "fraction_pruned": 0.5, "windows": 4, "context": 32}
    monkeypatch.setattr(study, "measured", lambda *args: dict(old))
    result = study.evaluate(torch.nn.Linear(1, 1))  # served from the (patched) store: never run
    assert result == {**old, "window_nll": None, "window_tokens": None, "unit_ids": None}
    # a table mixing it with a new evaluation has None in the gap (NaN would read as a measurement)
    table = pd.DataFrame([{"gamma": 1.0, **result},
                          {"gamma": 2.0, **result, "window_nll": [1.0], "window_tokens": [4]}])
    assert table.loc[0, "window_nll"] is None
    row = study.result_row(study.methods.headline, 0.2, dict(table.loc[0]), models=())
    assert study.ledger.outcomes_for([row]) == {}


def _run_config(study, model) -> dict:
    """The lineage a cached run was stored under (its folder's config.json)."""
    from bab.core.runs import run_of

    return json.loads((study.cache.root / run_of(model)["run"] / "config.json").read_text())["config"]


def test_static_masks_and_dense_fine_tuned_with_the_specialists_recipe(tiny_study):
    """The like-for-like baselines: the dense model continued, plain and under each matched static mask, with the
    specialists' data, steps, recipe and parent; each row prunes exactly its mask's fraction, measured under it."""
    import torch

    from bab.context.attach import is_attached
    from bab.context.evaluate import evaluate_lm
    from bab.context.static_masks import local_window_mask, strided_mask
    from bab.core.runs import run_of

    study = tiny_study()
    dense, _ = study.dense()
    specialist, _ = study.pruned(1.0)
    table, models = study.static_fine_tuned_baselines({0.1: 0.5, 1.0: 0.8})
    T = study.eval_context
    assert list(zip(table.gamma, table.kind, table.text, strict=True)) == [
        (0.1, "local", "val"), (0.1, "strided", "val"), (1.0, "local", "val"), (1.0, "strided", "val")]
    untouched = pd.concat([study.static_baselines(dense, {"val": f}) for f in (0.5, 0.8)], ignore_index=True)
    assert list(table["size"]) == list(untouched["size"]) and table.fine_tuned.all()
    for r in table.itertuples():
        # the fraction pruned is the matched mask's, counted by hand: a window of w keeps the T - d pairs at each
        # distance d < w; a stride s the distances below s and the multiples of s
        kept = sum(T - d for d in range(1, T) if d < r.size or (r.kind == "strided" and d % r.size == 0))
        assert r.fraction_pruned == pytest.approx(1 - kept / (T * (T - 1) / 2), abs=1e-6)  # a float32 mean
        model = models[r.kind, r.gamma]
        mask = local_window_mask(T, r.size) if r.kind == "local" else strided_mask(T, r.size)
        direct = evaluate_lm(model, study.build().val_ids, T, prune=False, max_windows=study.profile.eval_windows,
                             attn_mask=mask)
        assert r.perplexity == pytest.approx(direct["perplexity"], rel=1e-6) and r.window_nll == direct["window_nll"]
        assert not is_attached(model)
        assert any(not torch.equal(v, dense.state_dict()[k]) for k, v in model.state_dict().items())
        # its run's lineage is the specialist's but for the objective, the interactions and the mask
        mine, theirs = _run_config(study, model), _run_config(study, specialist)
        assert mine["static_mask"] == {"kind": r.kind, "size": r.size}
        assert mine["parent"] == theirs["parent"] and mine["data"] == theirs["data"]
        assert {**mine["train"], "objective": None, "gamma": None} == {**theirs["train"], "objective": None,
                                                                        "gamma": None}
        assert mine["train"].get("objective", "lm") == "lm" and "gamma" not in mine["train"]
        assert mine["model"]["pruning"] is None and theirs["model"]["pruning"] is not None
    dense_ft, metrics = study.dense_fine_tuned()
    assert len(metrics["history"]) >= 1 and metrics["history"][-1]["step"] == study.profile.finetune.steps
    assert not is_attached(dense_ft) and "static_mask" not in _run_config(study, dense_ft)
    assert _run_config(study, dense_ft)["parent"] == _run_config(study, specialist)["parent"]
    masked = models["local", 0.1]
    assert any(not torch.equal(v, dense_ft.state_dict()[k]) for k, v in masked.state_dict().items())
    # the rows: declared method and settings, each with its windows for the claims' paired interval
    rows = study.static_fine_tuned_rows(table, models)
    assert {r["method"] for r in rows} == {"static context mask, fine-tuned"}
    assert [r["settings"] for r in rows] == [{"kind": k, "gamma": g} for g in (0.1, 1.0) for k in ("local", "strided")]
    assert [r["cost"] for r in rows] == pytest.approx([1 - f for f in table.fraction_pruned])
    kinds = {json.loads(key)[-1] for key in study.ledger.outcomes_for(rows[:1])}
    assert kinds == {"window_nll", "window_tokens", "unit_ids"}
    method = study.methods.static_finetuned
    assert (method.settings, method.origin, method.budget) == (("kind", "gamma"), "baseline", "none")
    # `python -m bab train 06 gamma-1-static` trains the runs the notebook's call at the specialist's fraction reads
    fraction = study.evaluate(specialist)["fraction_pruned"]
    _, at_specialist = study.static_fine_tuned_baselines({1.0: fraction})
    for kind in ("local", "strided"):
        assert run_of(study.static_fine_tuned_for(1.0, kind)[0]) == run_of(at_specialist[kind, 1.0])
    # a second study trains nothing
    again = tiny_study()
    assert again.static_fine_tuned("local", int(table["size"][0]))[1]["cached"]
    assert again.dense_fine_tuned()[1]["cached"]
