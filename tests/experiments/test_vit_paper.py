"""Sparsifiner's paper rows, notebook 05's profiles, and nbval's data check for Fashion-MNIST."""

import pytest

import conftest
from bab.data import images
from bab.experiments.profiles import get_profile
from bab.report import paper
from bab.report.results import validate_rows
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.vit import ViTClassifierConfig


def test_sparsifiner_rows_are_valid_and_reach_the_comparison_table():
    rows = [{k: v for k, v in row.items() if k != "note" or v} for row in paper.SPARSIFINER]
    validate_rows(rows)
    find = {(r["experiment"], r["method"], r["budget"]): r for r in paper.SPARSIFINER}
    assert find[("vit_sparsifiner", "sparsifiner", 0.1)]["accuracy"] == 79.42
    assert find[("vit_sparsifiner", "sparsifiner", 0.1)]["cost"] == pytest.approx(111.4 / 357.7, abs=1e-4)
    assert find[("vit_sparsifiner", "dense", 1.0)]["accuracy"] == 79.82
    ours = [{"experiment": "vit_sparsifiner", "method": "sparsifiner", "budget": 0.1, "cost": 0.3,
             "accuracy": 80.0, "speedup": None}]
    table = paper.comparison_table(ours)
    row = table[(table.method == "sparsifiner") & (table.budget == 0.1)].iloc[0]
    assert row["accuracy gap"] == pytest.approx(80.0 - 79.42)


def test_vit_profiles_build_valid_models_and_the_paper_budgets():
    for name in ("smoke", "quick", "paper"):
        p = get_profile("vit_sparsifiner", name)
        config = ViTClassifierConfig(**p.model, predictor=True, n_down=p.n_down, tau=p.tau, up_prune=p.up_prune)
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
