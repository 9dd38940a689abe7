"""The notebooks' registry (bab.experiments.registry) and the lists derived from it."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bab.experiments import registry
from bab.experiments.methods import DECLARING_MODULES
from bab.experiments.profiles import EXPERIMENTS, PROFILE_NAMES, profiles_of
from bab.experiments.steps import NOTEBOOKS as STEPS
from bab.report.pages.figures import PANELS, PAPER_OF_MODULE, paper_of
from bab.report.results.seeds import SEEDED_NOTEBOOKS

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_notebook_exists_with_its_package_profiles_and_rows():
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [notebook.stem for notebook in registry.NOTEBOOKS] == stems
    for notebook in registry.NOTEBOOKS:
        for experiment, _ in notebook.profiles:
            assert set(profiles_of(experiment)) == set(PROFILE_NAMES), notebook.stem
        assert notebook.experiment in {s.experiment for s in importlib.import_module(notebook.module).METHOD_SETS}


def test_every_experiment_has_a_record_profile_at_three_seeds_naming_its_reductions():
    assert PROFILE_NAMES == ("smoke", "quick", "record", "paper")
    for experiment in EXPERIMENTS:
        profiles = profiles_of(experiment)
        record = profiles["record"]
        assert record.name == "record" and record.report_seeds == (7, 13, 21), experiment
        # each reduction against the paper's protocol named once, in words
        assert record.reductions and len(set(record.reductions)) == len(record.reductions), experiment
        assert all(isinstance(r, str) and r.strip() for r in record.reductions), experiment
        # the other profiles keep their seeds: smoke and quick run once
        assert profiles["smoke"].report_seeds == profiles["quick"].report_seeds == (), experiment


def test_the_derived_lists_follow_the_registry():
    assert EXPERIMENTS == {
        "synthetic": ("bab.experiments.synthetic", "SYNTHETIC"),
        "ag_news_custom": ("bab.experiments.text", "AG_NEWS"),
        "bert_ag_news": ("bab.experiments.bert", "BERT_AG_NEWS"),
        "bert_dbpedia14": ("bab.experiments.bert", "BERT_DBPEDIA"),
        "vit_sparsifiner": ("bab.experiments.vit", "VIT"),
        "gpt2_context_pruning": ("bab.experiments.context_pruning", "GPT2_CONTEXT_PRUNING"),
        "pretrained_context_pruning": ("bab.experiments.pretrained_context", "PRETRAINED_CONTEXT_PRUNING"),
    }
    assert DECLARING_MODULES == tuple(dict.fromkeys(module for module, _ in EXPERIMENTS.values()))
    assert SEEDED_NOTEBOOKS == {"01_synthetic": "synthetic", "02_ag_news_custom": "ag_news_custom",
                                "03_bert_ag_news": "bert_ag_news", "04_dbpedia_bert": "bert_dbpedia14",
                                "05_vit_sparsifiner": "vit_sparsifiner",
                                "06_gpt2_context_pruning": "gpt2_context_pruning",
                                "07_pretrained_decoder_context_pruning": "pretrained_context_pruning"}
    assert PANELS == ("budgeted attention", "dynamic context pruning", "sparsifiner")
    assert set(PAPER_OF_MODULE) == set(DECLARING_MODULES)
    assert [paper_of(e) for e in ("synthetic", "bert_dbpedia14", "distilbert_ag_news", "vit_sparsifiner_197",
                                  "pretrained_context_pruning", "no such experiment")] == [
        "budgeted attention", "budgeted attention", "budgeted attention", "sparsifiner", "dynamic context pruning",
        "other experiments"]
    assert {number: (entry.experiment, entry.study_class, entry.evaluation is not None)
            for number, entry in STEPS.items()} == {
        "03": ("bert_ag_news", "bab.experiments.bert:BertStudy", False),
        "04": ("bert_dbpedia14", "bab.experiments.bert:BertStudy", False),
        "05": ("vit_sparsifiner", "bab.experiments.vit:ViTStudy", False),
        "06": ("gpt2_context_pruning", "bab.experiments.context_pruning:ContextPruningStudy", False),
        "07": ("pretrained_context_pruning", "bab.experiments.pretrained_context:PretrainedContextStudy", True)}
    assert all(callable(entry.training) for entry in STEPS.values())


def test_a_notebook_entry_is_checked():
    with pytest.raises(ValueError, match="paper must be one of"):
        registry.Notebook("08_x", "bab.experiments.x", "another paper", (("x", "X"),))
    with pytest.raises(ValueError, match="steps need the study class"):
        registry.Notebook("08_x", "bab.experiments.x", registry.SPARSIFINER, (("x", "X"),),
                          training_steps="bab.experiments.steps:vit_training_steps")
    assert registry.Notebook("08_x", "bab.experiments.x", registry.SPARSIFINER, (("x", "X"),)).number == "08"


def test_the_synthetic_profile_imports_neither_transformers_nor_the_other_studies():
    code = ("import json, sys; from bab.experiments.profiles import get_profile; get_profile('synthetic', 'smoke'); "
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m == 'transformers' or m.startswith('bab.experiments.'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                       check=True).stdout)
    assert "transformers" not in loaded
    assert {m.split(".")[2] for m in loaded} <= {"profiles", "registry", "synthetic", "pipelines", "methods", "study"}
    assert {m for m in loaded if ".pipelines." in m} <= {"bab.experiments.pipelines.heads",
                                                         "bab.experiments.pipelines.hard_recipe"}
