"""Every result row names the trained models it measured; save_results adds who trained them and whether they
came from the run cache. Checked on tiny models trained through a real run cache."""

import json
import statistics

import pytest
import torch

from bab.core.ledger import RunLedger
from bab.core.provenance import git_commit
from bab.core.runs import RunCache, as_downloaded, config_key, train_cached
from bab.experiments.synthetic import SYNTHETIC, SyntheticExperiment
from bab.report.results.contract import save_results, validate_rows, with_provenance


def trained(cache, seed, lineage=None, ledger=None):
    """A one-layer model trained (or loaded) through ``cache``, noted in ``ledger``: (model, its run folder's name)."""
    lineage = lineage or {"seed": seed}
    model, _, full = train_cached(cache, "tiny", lineage, lambda: torch.nn.Linear(2, 2),
                                  lambda model, checkpoint: {"train_seconds": 1.0}, seed=seed, method="heads",
                                  version=1, ledger=ledger)
    return model, f"tiny-{config_key(full)}"


@pytest.fixture
def study():
    return SyntheticExperiment(SYNTHETIC["smoke"], cache=False)


def test_a_row_names_the_run_and_seed_of_the_model_it_measured(tmp_path, study):
    model, run = trained(RunCache(tmp_path), seed=13)
    row = study.result_row(study.methods.warm, 0.5, {"cost": 0.5, "accuracy": 90.0}, models=model)
    assert (row["runs"], row["seeds"]) == ([run], [13])


def test_save_results_adds_the_training_commit_and_cache_hits(tmp_path, study):
    cache = RunCache(tmp_path / "cache")
    model, run = trained(cache, seed=7, ledger=study.ledger)
    rows = [study.result_row(study.methods.warm, 0.5, {"cost": 0.5, "accuracy": 90.0}, models=model)]
    saved = json.loads(save_results(rows, tmp_path / "01.json", study.ledger).read_text())
    assert saved["rows"][0]["trained_at"] == [git_commit()] and saved["rows"][0]["cache_hits"] == 0
    assert saved["code"]["bab/report/results/contract.py"]  # the digests of the bab modules this process loaded

    ledger = RunLedger()  # the next kernel's: it finds the model in the cache
    model, _ = trained(cache, seed=7, ledger=ledger)
    rows = [study.result_row(study.methods.warm, 0.5, {"cost": 0.5, "accuracy": 90.0}, models=model)]
    saved = json.loads(save_results(rows, tmp_path / "01.json", ledger).read_text())
    assert saved["rows"][0]["cache_hits"] == 1 and saved["rows"][0]["runs"] == [run]


def test_a_mean_over_seeds_carries_every_seed_and_the_sample_std(tmp_path, study):
    cache = RunCache(tmp_path)
    per_seed = [(trained(cache, seed)[0], {"cost": cost, "accuracy": accuracy})
                for seed, cost, accuracy in ((7, 0.4, 90.0), (13, 0.5, 60.0), (21, 0.6, 30.0))]
    row = study.mean_row(study.methods.scratch, 0.5, per_seed)
    assert row["accuracy"] == pytest.approx(60.0) and row["cost"] == pytest.approx(0.5)
    # sample standard deviation of 90, 60, 30: sqrt((30^2 + 0 + 30^2) / 2) = 30
    assert row["accuracy_std"] == pytest.approx(30.0) == statistics.stdev([90.0, 60.0, 30.0])
    assert row["seeds"] == [7, 13, 21] and len(row["runs"]) == 3
    one = study.mean_row(study.methods.scratch, 0.5, per_seed[:1])
    assert one["seeds"] == [7] and "accuracy_std" not in one


def test_a_model_outside_the_run_cache_is_refused_and_a_downloaded_one_names_no_run(study):
    with pytest.raises(ValueError, match="did not come from the run cache"):
        study.result_row(study.methods.dense, 1.0, {}, models=torch.nn.Linear(2, 2))
    row = study.result_row(study.methods.dense, 1.0, {}, models=as_downloaded(torch.nn.Linear(2, 2)))
    assert "runs" not in row and "seeds" not in row


def test_a_row_naming_a_run_this_kernel_never_used_is_refused():
    rows = validate_rows([{"experiment": "synthetic", "method": "dense", "budget": 1.0, "cost": 1.0,
                           "accuracy": 99.0, "speedup": None, "runs": ["synthetic-dense-abc"], "seeds": [13]}])
    with pytest.raises(ValueError, match="neither trained nor loaded"):
        with_provenance(rows, [])


@pytest.mark.parametrize("extra, message", [
    ({"runs": []}, "non-empty list of run names"),
    ({"runs": ["a"], "seeds": ["13"]}, "list of whole numbers"),
    ({"value": 0.9}, "declares no 'value' column"),
    ({"runs": ["a"], "cache_hits": 2}, "count the row's runs"),
])
def test_the_contract_checks_the_provenance_columns(extra, message):
    base = {"experiment": "synthetic", "method": "dense", "budget": 1.0, "cost": 1.0, "accuracy": 99.0,
            "speedup": None}
    with pytest.raises(ValueError, match=message):
        validate_rows([{**base, **extra}])
