"""Notebook 05's three predictor presets (the profile's, the paper's text and the official code's whole predictor), the
choice between them on validation, and the 197-token variant with its like-for-like 50-token reference and verdict."""

from dataclasses import replace

import matplotlib
import pandas as pd
import pytest
import torch

from bab.experiments.profiles import PROFILE_NAMES, get_profile
from bab.experiments.vit import (
    PREDICTOR_PRESETS,
    VIT,
    VIT_METHODS,
    ViT197Study,
    ViTStudy,
    carry_over,
    carry_over_sentence,
    choose_predictor_preset,
    gaps_against_dense,
    official_preset,
    paper_text_preset,
    pick_preset,
    predictor_preset,
    token_count_control,
    two_standard_errors,
)
from bab.report.results.contract import validate_rows
from bab.sparsifiner import plots
from bab.sparsifiner.attach import sparsifiner_state
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.vit import vit_forward

matplotlib.use("Agg")

# ----------------------------------------------------------------------------- a tiny study


@pytest.fixture
def tiny_study(tiny_vit_study):
    """The shared tiny ViT study (conftest) with one epoch per phase: ``tiny_study(study_class=ViTStudy)``."""
    smoke = get_profile("vit_sparsifiner", "smoke")
    return lambda study_class=ViTStudy: tiny_vit_study(
        study_class, phase1=replace(smoke.phase1, epochs=1), phase2=replace(smoke.phase2, epochs=1, batch_size=8),
        variant_197=None)


def accuracy_by_loop(model, data, **forward) -> float:
    """Accuracy (%) counted one image at a time."""
    pixels, labels = data.tensors
    correct = 0
    with torch.no_grad():
        for i in range(len(labels)):
            correct += int(vit_forward(model, pixels[i:i + 1], **forward).logits.argmax(-1).item() == labels[i].item())
    return 100.0 * correct / len(labels)


# ----------------------------------------------------------------------------- the presets


def test_the_official_preset_scales_the_official_thresholds_as_the_profile_scales_the_papers():
    quick = VIT["quick"]
    official = official_preset(quick)
    config = ViTStudy(official, progress=False).sparsifiner_config().connectivity
    # at 50 tokens: n_down 8 (= 50 // 6, the official rule), top 2 of 8, |W_up| pruned at 2 x the profile's 0.04
    assert config == ConnectivityConfig.official(n_down=8, tau=0.2, up_prune=0.08, top_m=2)
    # the official code's phase 2 leaves the predictor out of the optimizer: the profile's frozen phase 2
    assert official.phase2 == quick.phase2 and official.phase2.joint_predictor is False
    # only the predictor changes: the dense teacher, Linformer and the head gates are the same runs
    assert (official.model, official.dense, official.phase1, official.heads) == (quick.model, quick.dense,
                                                                                quick.phase1, quick.heads)
    # at 197 tokens with the paper's sizes the scaling gives the official config itself (N // 6 = 32, 2e-2, top 8)
    variant = quick.variant_197
    config_197 = ViTStudy(official_preset(variant), progress=False).sparsifiner_config().connectivity
    assert config_197 == ConnectivityConfig.official()


def test_the_paper_text_preset_is_the_predictors_defaults_with_a_joint_phase_2():
    quick = VIT["quick"]
    paper_text = paper_text_preset(quick)
    config = ViTStudy(paper_text, progress=False).sparsifiner_config().connectivity
    # the predictor's defaults are the paper's text; n_down, tau and the prune threshold stay the profile's
    mine = quick.connectivity
    assert config == ConnectivityConfig(n_down=mine.n_down, tau=mine.tau, up_prune=mine.up_prune)
    assert (config.cls_dense, config.coefficients, config.basis_threshold_abs, config.predictor_scale) == (
        False, "threshold", False, "head_dim")
    assert paper_text.phase2.joint_predictor is True and paper_text.phase2.lambda_attn_joint == 0.0
    assert replace(paper_text.phase2, joint_predictor=False) == quick.phase2
    assert (paper_text.model, paper_text.dense, paper_text.phase1) == (quick.model, quick.dense, quick.phase1)


def test_predictor_preset_names_the_presets_and_rejects_others():
    quick = VIT["quick"]
    assert PREDICTOR_PRESETS == ("profile", "paper_text", "official")
    assert predictor_preset(quick, "profile") is quick
    assert predictor_preset(quick, "paper_text") == paper_text_preset(quick)
    assert predictor_preset(quick, "official") == official_preset(quick)
    with pytest.raises(ValueError, match="'profile', 'paper_text', 'official'"):
        predictor_preset(quick, "paper")


def test_the_presets_share_the_dense_teacher_and_train_their_own_predictors(tiny_study):
    study, _ = tiny_study()
    profile_study, official_study = study.preset_study("profile"), study.preset_study("official")
    assert profile_study.profile is study.profile and official_study.cache is study.cache
    _, _, dense_lineage = study.dense()
    _, metrics, official_dense_lineage = official_study.dense()
    assert metrics["cached"] is True and official_dense_lineage == dense_lineage
    _, profile_metrics, profile_lineage = profile_study.sparsifiner()
    official_model, official_metrics, official_lineage = official_study.sparsifiner()
    assert profile_metrics["cached"] is False and official_metrics["cached"] is False
    assert profile_lineage != official_lineage
    official = sparsifiner_state(official_model).connectivity
    assert official.basis == "shared" and official.connectivity_projections
    _, paper_metrics, paper_lineage = study.preset_study("paper_text").sparsifiner()
    assert paper_metrics["cached"] is False and paper_lineage not in (profile_lineage, official_lineage)
    assert paper_lineage["train"]["joint_predictor"] is True and "joint_predictor" not in profile_lineage["train"]
    assert "joint_predictor" not in official_lineage["train"]


def test_choose_predictor_preset_computes_the_validation_numbers_and_picks_the_higher_mean(tiny_study):
    study, data = tiny_study()
    choice = choose_predictor_preset(study, keep_rates=(0.5, 0.25))
    assert list(choice.table.index) == ["profile", "paper_text", "official"]
    for name in PREDICTOR_PRESETS:  # against accuracies counted one image at a time
        preset = study.preset_study(name)
        dense, _, _ = preset.dense()
        model, _, _ = preset.sparsifiner()
        row = choice.table.loc[name]
        expected_dense = accuracy_by_loop(dense, data)
        assert row["dense"] == pytest.approx(expected_dense)
        gaps = []
        for rate in (0.5, 0.25):
            expected = accuracy_by_loop(model, data, attention="masked", keep_rate=rate)
            assert row[f"@{rate:g}"] == pytest.approx(expected)
            assert row[f"vs dense @{rate:g}"] == pytest.approx(expected - expected_dense)
            gaps.append(expected - expected_dense)
        assert row["mean vs dense"] == pytest.approx(sum(gaps) / 2)
    means = choice.table["mean vs dense"]
    expected_choice = next(name for name in PREDICTOR_PRESETS if means[name] == means.max())  # the first best
    assert choice.chosen == expected_choice and expected_choice in choice.reason


def test_pick_preset_takes_the_higher_mean_and_a_tie_keeps_the_first():
    def table(**means):
        return pd.DataFrame({"vs dense @0.5": list(means.values()), "mean vs dense": list(means.values())},
                            index=pd.Index(list(means), name="preset"))

    chosen, reason = pick_preset(table(profile=-1.5, official=-0.5))
    assert chosen == "official"
    assert reason == ("mean validation accuracy against dense over keep rates 0.5: 'official' -0.50, 'profile' "
                      "-1.50 points; 'official' is higher by 1.00")
    assert pick_preset(table(profile=-0.2, official=-0.7))[0] == "profile"
    chosen, reason = pick_preset(table(profile=-1.0, official=-1.0))
    assert chosen == "profile" and "a tie keeps the earlier preset, 'profile'" in reason
    assert pick_preset(table(official=-3.0)) == ("official", "'official' is the only preset")
    with pytest.raises(ValueError, match="at least one preset"):
        pick_preset(table())


# ----------------------------------------------------------------------------- the 197-token variant


def test_every_profile_has_a_197_token_variant_with_the_papers_predictor_sizes():
    for name in PROFILE_NAMES:
        profile = VIT[name]
        variant = profile.variant_197
        config = ViT197Study(variant, progress=False).sparsifiner_config()
        assert config.num_tokens == 197 and config.image_size == 28 and config.patch_size == 2
        # the same ViT as at 50 tokens but for the patch size
        assert {k: v for k, v in variant.model.items() if k != "patch_size"} == \
            {k: v for k, v in profile.model.items() if k != "patch_size"}
        predictor = config.connectivity
        assert (predictor.n_down, predictor.tau, predictor.up_prune, predictor.top_m) == (32, 0.05, 1e-2, 8)
        # the profile's options but for the sizes
        assert predictor == profile.connectivity.replace(n_down=32, tau=0.05, up_prune=1e-2, top_m=8)
        control = token_count_control(profile)
        assert ViTStudy(control, progress=False).sparsifiner_config().num_tokens == 50
        assert (control.num_train, control.num_test, control.dense, control.phase1, control.phase2) == \
            (variant.num_train, variant.num_test, variant.dense, variant.phase1, variant.phase2)
        assert control.connectivity == profile.connectivity
    assert VIT["paper"].predictor_choice == "validation" and VIT["quick"].predictor_choice == "profile"


def test_the_profile_rejects_a_bad_variant_or_choice():
    quick = VIT["quick"]
    with pytest.raises(ValueError, match="197 tokens .*got 50"):
        replace(quick, variant_197=replace(quick, variant_197=None))
    with pytest.raises(ValueError, match="cannot hold a variant of its own"):
        replace(quick, variant_197=replace(quick.variant_197, variant_197=quick.variant_197))
    with pytest.raises(ValueError, match="predictor_choice must be one of \\('profile', 'validation'\\)"):
        replace(quick, predictor_choice="best")
    with pytest.raises(ValueError, match="no variant_197"):
        token_count_control(replace(quick, variant_197=None))


def test_retention_counts_accuracy_against_the_own_dense_model(tiny_study):
    study, data = tiny_study(ViT197Study)
    table = study.retention((0.5, 0.25))
    dense, dense_metrics, _ = study.dense()
    model, phase2_metrics, _ = study.sparsifiner()
    expected_dense = accuracy_by_loop(dense, data)
    assert list(table.model) == ["dense", "sparsifiner", "sparsifiner"]
    assert pd.isna(table.keep_rate.iloc[0]) and list(table.keep_rate.iloc[1:]) == [0.5, 0.25]
    assert table.accuracy.iloc[0] == pytest.approx(expected_dense)
    for i, rate in ((1, 0.5), (2, 0.25)):
        expected = accuracy_by_loop(model, data, attention="masked", keep_rate=rate)
        assert table.accuracy.iloc[i] == pytest.approx(expected)
        assert table["vs dense"].iloc[i] == pytest.approx(expected - expected_dense)
        assert table.retention.iloc[i] == pytest.approx(expected / expected_dense)
    assert table.cost.iloc[0] == pytest.approx(1.0) and table.cost.iloc[2] < table.cost.iloc[1]
    assert gaps_against_dense(table) == pytest.approx({0.5: table["vs dense"].iloc[1], 0.25: table["vs dense"].iloc[2]})
    seconds = study.training_seconds()
    assert seconds["dense"] == dense_metrics["train_seconds"] and seconds["phase 2"] == phase2_metrics["train_seconds"]
    assert set(seconds) == {"dense", "phase 1", "phase 2"} and all(s > 0 for s in seconds.values())


def test_the_197_token_rows_are_their_own_experiment(tiny_study):
    study, _ = tiny_study(ViT197Study)
    dense, _, _ = study.dense()
    assert study.experiment == "vit_sparsifiner_197"
    rows = [study.result_row(study.methods.dense, 1.0, {"accuracy": 80.0, "cost": 1.0}, models=dense),
            study.result_row(study.methods.sparsifiner, 0.1, {"accuracy": 79.0, "cost": 0.3}, models=dense)]
    assert [r["experiment"] for r in validate_rows(rows)] == ["vit_sparsifiner_197"] * 2
    with pytest.raises(ValueError, match="belongs to 'vit_sparsifiner'"):
        study.result_row(VIT_METHODS.dense, 1.0, {"accuracy": 80.0, "cost": 1.0}, models=dense)


def test_two_standard_errors_by_hand():
    assert two_standard_errors(80.0, 400) == pytest.approx(4.0)  # 200 * sqrt(0.8 * 0.2 / 400)
    assert two_standard_errors(50.0, 10000) == pytest.approx(1.0)
    assert two_standard_errors(100.0, 10) == 0.0
    with pytest.raises(ValueError, match="n >= 1"):
        two_standard_errors(80.0, 0)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        two_standard_errors(110.0, 10)


def test_carry_over_by_hand():
    gaps_50 = {0.5: -0.2, 0.25: -1.0, 0.1: -2.0}
    gaps_197 = {0.5: -0.3, 0.25: -2.5, 0.1: -0.5}
    verdicts = carry_over(gaps_50, gaps_197, tolerance=1.0)
    assert verdicts == {0.5: "carries over", 0.25: "larger loss at 197 tokens", 0.1: "smaller loss at 197 tokens"}
    # both differences are exactly 1.5: the tolerance is inclusive
    assert set(carry_over(gaps_50, gaps_197, tolerance=1.5).values()) == {"carries over"}
    assert carry_over_sentence(verdicts) == ("The 50-token result carries over to 197 tokens at keep 0.5; at keep 0.1 "
                                             "sparse attention loses less at 197 tokens; at keep 0.25 it loses more "
                                             "at 197 tokens")
    assert carry_over_sentence(carry_over(gaps_50, gaps_50, 0.0)) == ("The 50-token result carries over to 197 "
                                                                       "tokens at every keep rate")
    assert carry_over_sentence({0.1: "larger loss at 197 tokens", 0.5: "larger loss at 197 tokens"}) == (
        "The 50-token result does not carry over to 197 tokens; at keep 0.1, 0.5 it loses more at 197 tokens")
    with pytest.raises(ValueError, match="same keep rates"):
        carry_over(gaps_50, {0.5: 0.0}, 1.0)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        carry_over(gaps_50, gaps_197, -1.0)


def test_retention_plot_draws_one_line_per_model():
    tables = {label: pd.DataFrame({"model": ["dense", "sparsifiner", "sparsifiner"], "keep_rate": [None, 0.5, 0.1],
                                   "vs dense": [0.0, -0.5, -2.0], "cost": [1.0, 0.6, 0.3]})
              for label in ("50 tokens", "197 tokens")}
    fig = plots.retention_plot(tables)
    left, right = fig.axes[:2]
    assert len(left.lines) == 3 and len(right.lines) == 2  # two sweeps and the dense line; two cost curves
    assert list(left.lines[0].get_ydata()) == [-2.0, -0.5]  # sorted by keep rate, the dense row left out
    matplotlib.pyplot.close(fig)
