"""Cached measurements (RunCache.measured, Study.measured): a slow evaluation of a cached model is computed once,
read back the same, and never served for another model, setting, code version or thread count."""

import json

import pytest
import torch

import bab.context
from bab.core.ledger import RunLedger
from bab.core.provenance import git_commit
from bab.core.runs import RUN_TAG, RunCache
from bab.experiments.study import Study


def counted(result):
    calls = []

    def measure():
        calls.append(1)
        return result

    return measure, calls


def test_a_measurement_is_computed_once_and_reads_back_as_its_json_round_trip(tmp_path):
    config = {"model": "run-abc", "what": "evaluate", "settings": {"text": "austen", "windows": 2}}
    measure, calls = counted({"perplexity": 12.5, "pair": (1, 2), "fraction_pruned": 1 / 3})
    ledger = RunLedger()
    first = RunCache(tmp_path).measured("ppl", config, measure, ledger)
    assert first == {"perplexity": 12.5, "pair": [1, 2], "fraction_pruned": 1 / 3}  # a tuple comes back a list
    again = RunCache(tmp_path).measured("ppl", config, measure)  # another cache object: as a new process would
    assert again == first and len(calls) == 1
    [stored] = list((tmp_path / "measurements").glob("*.json"))
    content = json.loads(stored.read_text())
    assert content["config"] == json.loads(json.dumps(config)) and content["result"] == first
    assert content["measured_by"]["commit"] == git_commit() and content["measured_by"]["seconds"] >= 0
    assert not list((tmp_path / "measurements").glob(".*"))  # no temporary file left behind
    records = [m for m in ledger.measurements_used() if m["measurement"] == stored.name]
    assert records and records[0]["cached"] is False  # first use in this process: measured here


def test_another_config_is_measured_again_and_a_forged_file_is_ignored(tmp_path):
    cache = RunCache(tmp_path)
    base = {"model": "run-abc", "settings": {"text": "austen"}}
    measure, calls = counted({"perplexity": 1.0})
    cache.measured("ppl", base, measure)
    cache.measured("ppl", {**base, "settings": {"text": "wiki"}}, measure)
    cache.measured("ppl", {**base, "model": "run-def"}, measure)
    assert len(calls) == 3
    # same file name, another config inside (a hand edit or a key collision): never served
    path = cache.measurement_path("ppl", base)
    path.write_text(json.dumps({"config": {"model": "other"}, "result": {"perplexity": 99.0},
                                "measured_by": {"commit": None}}))
    assert cache.measured("ppl", base, measure) == {"perplexity": 1.0} and len(calls) == 4


def test_a_disabled_cache_measures_every_time_and_writes_nothing(tmp_path):
    cache = RunCache(tmp_path, enabled=False)
    measure, calls = counted({"accuracy": 0.5, "n": (3,)})
    assert cache.measured("zs", {"a": 1}, measure) == {"accuracy": 0.5, "n": [3]}
    cache.measured("zs", {"a": 1}, measure)
    assert len(calls) == 2 and not (tmp_path / "measurements").exists()


class TinyStudy(Study):
    """The Study base's measured() on a bare study: a context-method study with a fixed data lineage."""

    experiment, method, method_code = "tiny", "context", bab.context

    def data_lineage(self):
        return {"files": ["austen.txt"]}


def _tagged(run):
    torch.manual_seed(0)  # the same weights every time: what tells two models apart is their run
    model = torch.nn.Linear(2, 2)
    setattr(model, RUN_TAG, {"run": run, "seed": 0})
    return model


def test_a_study_keys_a_measurement_on_the_run_the_code_version_and_the_thread_count(tmp_path, monkeypatch):
    study = TinyStudy(None, cache=RunCache(tmp_path), progress=False)
    measure, calls = counted({"perplexity": 3.0})
    model = _tagged("tiny-prune-g1-abc")
    study.measured("evaluate", model, {"text": "austen"}, measure)
    study.measured("evaluate", _tagged("tiny-prune-g1-abc"), {"text": "austen"}, measure)  # same run: read back
    assert len(calls) == 1
    study.measured("evaluate", _tagged("tiny-prune-g3-abc"), {"text": "austen"}, measure)  # another run
    study.measured("evaluate", model, {"text": "wiki"}, measure)  # another setting
    assert len(calls) == 3
    monkeypatch.setattr(bab.context, "EVALUATION_VERSION", bab.context.EVALUATION_VERSION + 1)
    study.measured("evaluate", model, {"text": "austen"}, measure)  # the evaluation code changed
    assert len(calls) == 4
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        study.measured("evaluate", model, {"text": "austen"}, measure)  # sums in another order
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 5
    with torch.no_grad():
        model.weight.add_(1.0)  # the same run's model, changed after it was loaded: another model
    study.measured("evaluate", model, {"text": "austen"}, measure)
    assert len(calls) == 6


def test_a_model_no_run_names_is_measured_every_time(tmp_path):
    study = TinyStudy(None, cache=RunCache(tmp_path), progress=False)
    measure, calls = counted({"perplexity": 3.0})
    untagged = torch.nn.Linear(2, 2)
    downloaded = _tagged(None)  # as_downloaded, and the study names no downloaded model
    for model in (untagged, untagged, downloaded, downloaded):
        study.measured("evaluate", model, {"text": "austen"}, measure)
    assert len(calls) == 4 and not (tmp_path / "measurements").exists()


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": float("nan")}])
def test_a_config_that_is_not_plain_data_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="JSON-serialisable"):
        RunCache(tmp_path).measured("ppl", bad, lambda: {"a": 1})
