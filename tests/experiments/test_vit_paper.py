"""Sparsifiner's paper rows, notebook 05's profiles, and nbval's data check for Fashion-MNIST."""

from dataclasses import replace

import pandas as pd
import pytest

import conftest
from bab.data import images
from bab.experiments.profiles import PROFILE_NAMES, get_profile
from bab.report.results import paper
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.vit import ViTClassifierConfig


def test_sparsifiner_rows_are_valid_and_reach_the_comparison_table():
    paper.check_paper_rows(paper.SPARSIFINER)
    find = {(r["experiment"], r["method"], r["budget"]): r for r in paper.SPARSIFINER if "settings" not in r}
    assert find[("vit_sparsifiner", "sparsifiner", 0.1)]["accuracy"] == 79.42
    assert find[("vit_sparsifiner", "sparsifiner", 0.1)]["cost"] == pytest.approx(111.4 / 357.7, abs=1e-4)
    assert find[("vit_sparsifiner", "dense", 1.0)]["accuracy"] == 79.82
    ours = [{"experiment": "vit_sparsifiner", "method": "sparsifiner", "budget": 0.1, "cost": 0.3,
             "accuracy": 80.0, "speedup": None}]
    table = paper.comparison_table(ours)
    row = table[(table.method == "sparsifiner") & (table.budget == 0.1)].iloc[0]
    assert row["vs dense (paper)"] == pytest.approx(79.42 - 79.82)
    # EViT + Sparsifiner rows are told apart by their token keep rate, a typed setting joined as text
    combo = [{"experiment": "vit_sparsifiner", "method": "EViT + sparsifiner", "budget": 0.25, "cost": 0.2,
              "accuracy": 84.0, "speedup": None, "settings": {"token_keep": 0.7}}]
    table = paper.comparison_table(combo)
    joined = table[table.method == "EViT + sparsifiner"].set_index("settings")
    assert joined.loc["token_keep=0.7", "accuracy (ours)"] == 84.0
    assert joined.loc["token_keep=0.7", "accuracy (paper)"] == 79.5
    assert pd.isna(joined.loc["token_keep=0.5", "accuracy (ours)"])


def test_vit_profiles_build_valid_models_and_the_paper_budgets():
    for name in PROFILE_NAMES:
        p = get_profile("vit_sparsifiner", name)
        config = ViTClassifierConfig(**p.model, connectivity=p.connectivity)
        assert config.num_tokens == 50
        assert set(p.report_keep_rates) <= set(p.sweep_keep_rates)
        assert max(p.prune_layers) < config.num_layers
    paper_profile = get_profile("vit_sparsifiner", "paper")
    assert paper_profile.phase1.epochs == 5 and paper_profile.phase2.epochs == 40  # the paper's epochs
    assert paper_profile.phase2.lambda_token == 0.5 and paper_profile.phase2.lambda_kl == 0.5
    assert num_connections(0.1, 197) == 20  # the paper's "20 of 197 connections"


def test_nbval_skips_notebook_05_without_fashion_mnist(tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(images, "DEBIAN_DIR", tmp_path / "nowhere")
    reason = conftest._missing_data("05_vit_sparsifiner.ipynb")
    assert reason is not None and "fashion_mnist not found" in reason and "IDX" in reason
    folder = tmp_path / "fashion_mnist"
    folder.mkdir()
    for stem in images.FILES.values():
        (folder / (stem + ".gz")).write_bytes(b"")
    assert conftest._missing_data("05_vit_sparsifiner.ipynb") is None


def test_vit_head_recipe_is_the_heads_method_s_and_rejects_an_unknown_gate_start():
    quick = get_profile("vit_sparsifiner", "quick")
    assert quick.heads.gate_start.how == "elimination"  # the recipe chosen on validation (docs/sparsifiner.md)
    with pytest.raises(ValueError, match="'flat', 'random', 'ablation', 'elimination'"):
        replace(quick.heads.gate_start, how="nested")
    with pytest.raises(ValueError, match="sharpness > 0"):
        replace(quick.heads.gate_start, sharpness=0.0)
    with pytest.raises(ValueError, match="objective 'budgeted'"):  # the profile holds the soft step
        replace(quick, heads=replace(quick.heads, objective="static", budget=0.5,
                                     gate_start=replace(quick.heads.gate_start, how="flat")))


# the tiny study's budgeted heads: one epoch, the gates ranked on 8 images
_SMOKE_HEADS = get_profile("vit_sparsifiner", "smoke").heads
TINY_HEADS = dict(heads=replace(_SMOKE_HEADS, epochs=1, gate_start=replace(_SMOKE_HEADS.gate_start, examples=8)))


def test_nested_gates_reach_the_budgeted_heads_lineage_and_the_model(tmp_path, tiny_vit_study):
    """A tiny study end to end: the gate start reaches the lineage (so the run cache keys it and another start
    trains another checkpoint) and the model (nested gates are spread, flat ones are not)."""
    from dataclasses import replace

    study, _ = tiny_vit_study(**TINY_HEADS)
    tiny, cache, TinyStudy = study.profile, study.cache, type(study)

    def starting(how):
        return replace(tiny, heads=replace(tiny.heads, gate_start=replace(tiny.heads.gate_start, how=how)))

    soft, _, lineage = study.budgeted_heads()
    # the key names the options away from their defaults (the sharpness is at its default, 4.0)
    assert lineage["train"]["gate_start"] == {"how": "elimination", "examples": 8}
    flat_soft, metrics, flat_lineage = TinyStudy(starting("flat"), cache=cache, progress=False).budgeted_heads()
    assert metrics["cached"] is False and flat_lineage["train"]["gate_start"] == {"examples": 8}  # "flat": default
    random_soft, _, _ = TinyStudy(starting("random"), cache=cache, progress=False).budgeted_heads()
    # nested gates spread the heads apart; flat gates start (and, after one epoch, stay) nearly equal
    assert float(soft.gates(0.5).detach().std()) > 10 * float(flat_soft.gates(0.5).detach().std())
    assert float(random_soft.gates(0.5).detach().std()) > 10 * float(flat_soft.gates(0.5).detach().std())


def test_vit_hard_heads_keep_the_adaptation_only_when_validation_rises(tmp_path, monkeypatch, tiny_vit_study):
    import torch

    import bab.experiments.pipelines.vit as vit_study
    from bab.experiments.pipelines.hard_recipe import adaptation_kept

    study, data = tiny_vit_study(**TINY_HEADS)
    soft, _, _ = study.budgeted_heads()
    adapted, raw_metrics, raw_lineage = study.budgeted_heads_hard(select=False)
    assert raw_metrics["selected_epoch"] is None and "val_hard_mean" not in raw_metrics
    assert raw_lineage["selection"] is None

    # the recorded means against a loop written out here: hard top-k accuracy per budget, averaged
    pixels, labels = data.tensors

    def mean_hard_accuracy(model):
        with torch.no_grad():
            return sum(100.0 * (model(pixels, budget=b, mode="hard").logits.argmax(-1) == labels).float().mean()
                       for b in study.profile.head_budgets).item() / len(study.profile.head_budgets)

    chosen, metrics, lineage = study.budgeted_heads_hard()
    assert metrics["cached"] is False and lineage["selection"] is not None  # a run of its own: it selects
    expected = {"unadapted": mean_hard_accuracy(soft), "adapted": mean_hard_accuracy(adapted)}
    assert metrics["val_hard_mean"] == pytest.approx(expected, abs=1e-3)
    kept = expected["adapted"] > expected["unadapted"]
    assert adaptation_kept(metrics) == kept
    assert metrics["selected_epoch"] == (study.profile.heads.epochs if kept else 0)
    assert _same_weights(chosen, adapted if kept else soft)

    # the rule itself, on controlled scores (the training loop's selection: the starting weights are scored
    # first, the adapted ones last): strictly higher keeps the adaptation, a tie keeps the soft weights
    budgets = len(study.profile.head_budgets)
    for run, (adapted_score, want_adapted) in enumerate(((60.0, True), (50.0, False), (40.0, False))):
        calls = []

        def scored(model, data, score=adapted_score, calls=calls, **forward):
            calls.append(1)
            return {"accuracy": 50.0 if len(calls) <= budgets else score}

        monkeypatch.setattr(vit_study, "evaluate_heads", scored)
        study.cache = type(study.cache)(tmp_path / f"rule-{run}")  # retrained, not served from the cache
        model, metrics, _ = study.budgeted_heads_hard()
        assert adaptation_kept(metrics) is want_adapted
        assert metrics["val_hard_mean"] == {"unadapted": 50.0, "adapted": adapted_score}
        assert _same_weights(model, adapted) is want_adapted and _same_weights(model, soft) is not want_adapted


def _same_weights(a, b) -> bool:
    import torch

    state = b.state_dict()
    return all(torch.equal(value, state[name]) for name, value in a.state_dict().items())
