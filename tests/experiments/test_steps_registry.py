"""The notebooks' declared steps (bab.experiments.steps) behind `python -m bab train NN` / `evaluate NN`."""

from dataclasses import asdict

from bab.__main__ import main
from bab.core.runs import config_key
from bab.experiments.profiles import PROFILE_NAMES, get_profile
from bab.experiments.steps import NOTEBOOKS, NotebookSteps, chosen_steps


def test_notebook_07_declares_a_step_per_gamma_and_its_frozen_twin_at_each_profile(capsys):
    entry = NOTEBOOKS["07"]
    for name in PROFILE_NAMES:
        profile = get_profile(entry.experiment, name)
        study = entry.study(profile, cache=False, progress=False)
        gammas = [f"gamma-{g:g}" for g in profile.gammas]
        # where the specialists train the decoder's weights (not at quick): the dense fine-tune and the static masks
        # fine-tuned per gamma; the frozen twins where the profile has them (smoke, paper)
        full = not profile.finetune.freeze_pretrained
        twins = [] if profile.frozen_finetune is None else ["-frozen"]
        static = [g + "-static" for g in gammas] if full else []
        assert list(entry.training(study)) == [*(["dense"] if full else []), "budgeted",
                                               *[g + s for g in gammas for s in ("", *twins)], *static], name
        first = ["pretrained", "dense", "budgeted"] if full else ["pretrained", "budgeted", gammas[0]]
        assert list(entry.evaluation(study))[:3] == first, name
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
    # every notebook with steps runs once per seed at the record
    assert all(entry.takes_seed for entry in NOTEBOOKS.values())


def test_a_seed_is_refused_where_the_notebook_runs_once(capsys, monkeypatch):
    monkeypatch.setattr(NotebookSteps, "takes_seed", property(lambda self: False))
    assert main(["train", "07", "--seed", "7", "dense"]) == 2
    assert "runs at one seed" in capsys.readouterr().err


def test_notebooks_05_and_07_train_their_own_models_at_each_seed():
    """A run of 05 or 07 at a seed trains every model at that seed: the run keys of two seeds differ, and without a
    seed the study keeps the profile's (the smoke outputs stay as they were)."""
    vit = NOTEBOOKS["05"]
    smoke = get_profile(vit.experiment, "smoke")
    studies = {seed: vit.study(smoke, cache=False, progress=False, seed=seed) for seed in (7, 13)}
    assert vit.study(smoke, cache=False, progress=False).profile == smoke and smoke.seed == 13
    for seed, study in studies.items():
        p = study.profile
        assert p.seed == p.variant_197.seed == seed and study.data_lineage()["seed"] == seed
        assert study.evit_config(0.7).seed == study.evit_sparsifiner_config(0.7).seed == seed
        assert study.hard_heads_config().seed == seed
    keys = [config_key({"data": s.data_lineage(), "train": s.evit_config(0.7)}) for s in studies.values()]
    assert keys[0] != keys[1]

    decoder = NOTEBOOKS["07"]
    smoke = get_profile(decoder.experiment, "smoke")
    studies = {seed: decoder.study(smoke, cache=False, progress=False, seed=seed) for seed in (7, 13)}
    assert decoder.study(smoke, cache=False, progress=False).profile == smoke
    for seed, study in studies.items():
        p = study.profile
        assert p.finetune.seed == p.frozen_finetune.seed == p.budgeted.seed == seed
        assert study.plain_fine_tune_config().seed == seed  # the dense and static fine-tunes
        assert asdict(p.finetune) == {**asdict(smoke.finetune), "seed": seed}  # nothing else moves
    keys = [config_key(s.profile.finetune) for s in studies.values()]
    assert keys[0] != keys[1]
