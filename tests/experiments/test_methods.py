"""Typed method ids: every experiment declares its rows, and a row that does not fit fails where it is built."""

import pytest

from bab.experiments.methods import MECHANISMS, Method, MethodSet, method_of, methods, registry, settings_text
from bab.experiments.profiles import EXPERIMENTS
from bab.experiments.synthetic import SYNTHETIC, SyntheticExperiment


def test_every_experiment_with_a_notebook_declares_a_dense_reference():
    declared = registry()
    assert set(EXPERIMENTS) <= set(declared)
    for experiment, method_set in declared.items():
        dense = method_set["dense"]
        assert (dense.budget, dense.mechanism) == ("dense", "none"), experiment
        assert all(m.experiment == experiment and m.mechanism in MECHANISMS for m in method_set)


def test_result_row_takes_a_declared_method_and_checks_budget_and_settings():
    study = SyntheticExperiment(SYNTHETIC["smoke"], cache=False)
    M = study.methods
    row = study.result_row(M.warm, 0.50004, {"cost": 0.49, "accuracy": 97.0}, models=())
    assert row == {"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.49,
                   "accuracy": 97.0, "speedup": None}
    with pytest.raises(ValueError, match="takes a declared Method"):
        study.result_row("warm-start budgeted", 0.5, {}, models=())
    with pytest.raises(ValueError, match="belongs to 'ag_news_custom'"):
        study.result_row(registry()["ag_news_custom"].dense, 1.0, {}, models=())
    with pytest.raises(ValueError, match="dense reference"):
        study.result_row(M.dense, 0.5, {}, models=())
    with pytest.raises(TypeError, match="models"):  # every row says which trained models it measured
        study.result_row(M.warm, 0.5, {})
    with pytest.raises(AttributeError, match="declares no method 'wram'"):
        M.wram  # noqa: B018 (the attribute access is what is tested)


def test_settings_are_typed_values_with_a_canonical_text():
    gpt2 = registry()["gpt2_context_pruning"]
    assert gpt2.specialist.check_settings({"gamma": 0.03}) == {"gamma": 0.03}
    assert gpt2.static.check_settings({"gamma": 0.1, "kind": "strided"}) == {"kind": "strided", "gamma": 0.1}
    assert settings_text({"kind": "strided", "gamma": 0.1}) == "gamma=0.1, kind=strided"
    assert settings_text({"irreversible": True, "ablation": "no bias"}) == "ablation=no bias, irreversible=True"
    assert settings_text(None) == ""
    with pytest.raises(ValueError, match="finite number, text or bool"):
        gpt2.specialist.check_settings({"gamma": float("nan")})
    with pytest.raises(ValueError, match=r"takes the settings \['gamma'\]"):
        gpt2.specialist.check_settings({"gamma": 0.1, "tau": 2})


def test_method_sets_refuse_bad_declarations():
    with pytest.raises(ValueError, match="mechanism must be one of"):
        Method("x", "dense", "attention")
    with pytest.raises(ValueError, match="names repeat"):
        methods("x", ("a", "dense", "none", "dense", "paper"), ("b", "dense", "none", "dense", "paper"))
    with pytest.raises(ValueError, match="belongs to 'y'"):
        MethodSet("x", a=Method("y", "dense", "none", "dense"))
    with pytest.raises(ValueError, match="unknown experiment 'imagenet'"):
        method_of("imagenet", "dense")
