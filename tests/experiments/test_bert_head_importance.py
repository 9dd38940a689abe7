"""The BERT studies' post-hoc head importance is kept in the run cache as a measurement of the dense run: a second
process (here a second study on the same cache) reads the scores instead of scoring 72 masked heads again, and a
change to what is scored scores anew."""

from dataclasses import replace

import pytest
import torch

import bab.experiments.bert.study as bert_study
from bab.core.runs import RunCache
from bab.experiments.bert import BertStudy
from bab.experiments.profiles import get_profile
from bab.heads.hf_encoder import resolve_encoder_source
from tests.experiments.test_text_study import write_csv


@pytest.fixture
def studies(tmp_path, monkeypatch):
    try:
        resolve_encoder_source(get_profile("bert_ag_news", "smoke").model)
    except Exception as exc:  # noqa: BLE001 - whatever keeps the encoder away, the test cannot run without it
        pytest.skip(f"the MiniLM encoder is not installed here: {exc}")
    folder = tmp_path / "ag_news"
    folder.mkdir()
    write_csv(folder / "train.csv", 16, seed=1)
    write_csv(folder / "test.csv", 8, seed=2)
    base = get_profile("bert_ag_news", "smoke")
    profile = replace(base, num_train=32, num_val=12, num_test=12, max_len=16, importance_examples=6,
                      dense=replace(base.dense, epochs=1, batch_size=16))
    calls = []

    def counted(model, data, batch_size):
        calls.append(len(data))
        return head_importance(model, data, batch_size=batch_size)

    head_importance = bert_study.head_importance
    monkeypatch.setattr(bert_study, "head_importance", counted)

    def make(**changes):
        return BertStudy(replace(profile, **changes), "bert_ag_news", cache=RunCache(tmp_path / "cache"),
                         progress=False, data_path=folder)

    return make, calls


def test_head_importance_is_scored_once_and_read_back_from_the_run_cache(studies):
    make, calls = studies
    first = make()
    dense = first.dense()[0]
    scores = first.head_importance(dense)
    assert calls == [6] and scores.shape == (dense.config.num_layers, dense.config.num_heads)
    assert scores.dtype == torch.float32 and scores.abs().sum() > 0
    second = make()
    again = second.head_importance(second.dense()[0])
    assert calls == [6]  # read, not scored
    assert torch.equal(again, scores)  # the same ranking, to the bit
    kept = [m for m in first.ledger.measurements_used() if "head-importance" in m["measurement"]]
    assert kept[-1]["cached"] is False and kept[-1]["commit"]  # this process measured it, at a named commit
    other = make(importance_examples=4)
    other.head_importance(other.dense()[0])
    assert calls == [6, 4]  # scored on other examples: another measurement
    assert len(list(first.cache.root.glob("measurements/*head-importance*"))) == 2
