"""TextStudy on a tiny generated AG-News-format CSV: data, cache keys, selection, timing batches."""

import csv
import random
from dataclasses import replace

import pytest

from bab.core.runs import RunCache
from bab.experiments.profiles import get_profile
from bab.experiments.text import TextStudy

TOPICS = [["goal", "match", "team"], ["market", "stock", "bank"], ["war", "minister", "vote"],
          ["chip", "software", "web"]]


def write_csv(path, rows_per_class, seed):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        for label, words in enumerate(TOPICS, start=1):
            for _ in range(rows_per_class):
                body = " ".join(rng.choice(words + ["the", "a", "news"]) for _ in range(12))
                writer.writerow([label, f"{words[0]} headline", body])


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "ag_news"
    folder.mkdir()
    write_csv(folder / "train.csv", 30, seed=1)
    write_csv(folder / "test.csv", 10, seed=2)
    base = get_profile("ag_news_custom", "smoke")
    profile = replace(base, num_train=64, num_val=24, num_test=24, max_len=16, timing_examples=20,
                      timing_batch_size=8, dense=replace(base.dense, epochs=1), warm=replace(base.warm, epochs=1))
    return TextStudy(profile, "ag_news_custom", cache=RunCache(tmp_path / "cache"), progress=False, data_path=folder)


def test_splits_model_shape_and_timing_batches(study):
    splits = study.splits()
    assert [len(splits[k]) for k in ("train", "val", "test")] == [64, 24, 24]
    config = study.model_config("budget")
    assert config.vocab_size == study.build().tokenizer.vocab_size
    assert config.num_classes == 4 and config.gates == "budget"
    batches = study.timing_batches()
    assert [len(b) for b in batches] == [8, 8, 4]


def test_dense_is_cached_and_seeds_do_not_share_checkpoints(study, tmp_path):
    _, first, lineage = study.dense()
    _, second, _ = study.dense()
    assert (first["cached"], second["cached"]) == (False, True)
    assert first["selected_epoch"] == 1
    other = TextStudy(study.profile, "ag_news_custom", cache=study.cache, progress=False, seed=7,
                      data_path=study.data_path)
    _, metrics, other_lineage = other.dense()
    assert metrics["cached"] is False
    assert other_lineage["data"]["seed"] == 7 and lineage["data"]["seed"] == 13


def test_selection_scores_gated_models_at_the_budgets_they_serve(study):
    model, _, _ = study.warm_start_budgeted()
    select = study.selection(study.profile.warm)
    score = select(model)
    assert 0.0 <= score <= 100.0
    static_select = study.selection(replace(study.profile.static, budget=0.25))
    assert 0.0 <= static_select(model) <= 100.0


def test_recipe_ablation_rows_follow_their_variants(study):
    from bab.experiments.pipelines.hard_recipe import BASE, CHOSEN, VARIANTS, compact, recipe_ablation

    nested_floor = VARIANTS["nested + per-layer floor 1"]
    table = recipe_ablation(study, [BASE, nested_floor, CHOSEN])
    assert list(table.index) == [BASE.name, nested_floor.name, CHOSEN.name]
    # the paper's flat gates barely differ across heads; the nested start spreads them
    assert table.loc[BASE.name, "gate std @0.5"] < 0.05 < table.loc[nested_floor.name, "gate std @0.5"]
    for b in (0.25, 0.5, 0.75):
        assert 0 <= table.loc[BASE.name, f"hard test @{b}"] <= 100
    mean = table[[f"hard val @{b}" for b in (0.25, 0.5, 0.75)]].mean(axis=1)
    assert (table["mean hard val"] - mean).abs().max() < 1e-9
    assert "hard test @0.5" in compact(table).columns
    # the chosen row is the profile's own recipe: served from the cache the notebook's models use
    _, metrics, _ = study.hard_adapted()
    assert metrics["cached"] is True


def test_variant_configs_depart_from_the_paper_recipe(study):
    from bab.experiments.pipelines.hard_recipe import BASE, CHOSEN, VARIANTS, variant_configs

    soft, hard = variant_configs(study, BASE)
    assert (soft.gate_start.how, soft.two_sided) == ("flat", False)
    assert (hard.epochs, hard.budget_choices, hard.adaptation.kd_teacher, hard.adaptation.min_per_layer) == (
        1, None, "soft", 0)
    soft, hard = variant_configs(study, VARIANTS["nested + lr x 2"])
    assert (soft.gate_start.how, soft.two_sided) == ("elimination", True)
    assert hard.lr == pytest.approx(2 * study.profile.hard_adapt.lr)
    # a nested override changes only the options it names: the beta row keeps the paper's teacher and floor
    _, hard = variant_configs(study, VARIANTS["nested + beta 0.9"])
    assert hard.adaptation == replace(study.profile.hard_adapt.adaptation, kd_beta=0.9, kd_teacher="soft",
                                      min_per_layer=0)
    _, hard = variant_configs(study, VARIANTS["nested + budget fixed at 0.5"])
    assert (hard.budget, hard.budget_choices) == (0.5, None)
    assert variant_configs(study, CHOSEN) == (study.profile.warm, study.profile.hard_adapt)


def test_recipe_is_chosen_on_validation_only():
    import pandas as pd

    from bab.experiments.pipelines.hard_recipe import choose_recipe

    table = pd.DataFrame({"mean hard val": [70.0, 72.0, 71.0], "hard test @0.5": [90.0, 60.0, 99.0]},
                         index=["a", "b", "c"])
    assert choose_recipe(table) == "b"


def test_the_quick_ablation_runs_the_rows_that_carry_the_choice():
    from bab.experiments.pipelines.hard_recipe import BASE, CHOSEN, DECISIVE, VARIANTS
    from bab.experiments.text import AG_NEWS

    assert set(DECISIVE) <= set(VARIANTS) and len(set(DECISIVE)) == len(DECISIVE)
    assert DECISIVE[0] == BASE.name and DECISIVE[-1] == CHOSEN.name
    assert AG_NEWS["quick"].recipe_variants == DECISIVE
    assert len(VARIANTS) == 20  # the full table stays available (notebook 02: -p recipe_rows all)
