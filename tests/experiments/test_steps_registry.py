"""The notebooks' declared steps (bab.experiments.steps) behind `python -m bab train NN` / `evaluate NN`."""

from bab.__main__ import main
from bab.experiments.profiles import get_profile
from bab.experiments.steps import NOTEBOOKS, chosen_steps


def test_notebook_07_declares_a_step_per_gamma_and_its_frozen_twin_at_each_profile(capsys):
    entry = NOTEBOOKS["07"]
    for name in ("smoke", "quick", "paper"):
        profile = get_profile(entry.experiment, name)
        study = entry.study(profile, cache=False, progress=False)
        gammas = [f"gamma-{g:g}" for g in profile.gammas]
        # the static masks fine-tuned per gamma where the specialists train the decoder's weights (not at quick)
        static = [] if profile.finetune.freeze_pretrained else [g + "-static" for g in gammas]
        assert list(entry.training(study)) == ["dense", "budgeted", *[s for g in gammas for s in (g, g + "-frozen")],
                                               *static]
        assert list(entry.evaluation(study))[:3] == ["pretrained", "dense", "budgeted"]
    assert main(["train", "07", "--help"]) == 0
    out = capsys.readouterr().out
    assert "training steps at profile paper" in out and "  gamma-3-frozen " in out


def test_unknown_steps_are_refused_naming_the_profile_s_steps():
    import pytest

    entry = NOTEBOOKS["07"]
    study = entry.study(get_profile(entry.experiment, "paper"), cache=False, progress=False)
    steps = entry.training(study)
    assert [s.description for s in chosen_steps(steps, ["gamma-3", "dense"], "paper")] == [
        steps["gamma-3"].description, steps["dense"].description]
    with pytest.raises(ValueError, match="profile 'paper' has no step 'gamma-2'; choose among dense, budgeted"):
        chosen_steps(steps, ["dense", "gamma-2"], "paper")


def test_the_encoder_notebooks_declare_the_trainings_of_their_profile():
    for notebook, experiment, steps in (("03", "bert_ag_news", ["dense", "budgeted", "static", "posthoc"]),
                                        ("04", "bert_dbpedia14", ["dense", "budgeted", "ag-news"])):
        entry = NOTEBOOKS[notebook]
        study = entry.study(get_profile(entry.experiment, "paper"), cache=False, progress=False, seed=7)
        assert study.experiment == experiment and study.default_seed == 7 and entry.takes_seed
        assert list(entry.training(study)) == steps
    assert not NOTEBOOKS["07"].takes_seed and not NOTEBOOKS["05"].takes_seed


def test_a_seed_is_refused_where_the_notebook_runs_once(capsys):
    assert main(["train", "07", "--seed", "7", "dense"]) == 2
    assert "runs at one seed" in capsys.readouterr().err
