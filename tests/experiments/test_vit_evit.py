"""Notebook 05's token-pruning fine-tunes: EViT fine-tuned (``ViTStudy.evit``) and Sparsif-EViT
(``ViTStudy.evit_sparsifiner``) through the run cache, their rows, and the other steps' keys left as they were."""

from dataclasses import replace

import pytest

from bab.experiments.profiles import get_profile
from bab.experiments.vit import VIT, VIT_METHODS
from bab.report.results.contract import validate_rows
from bab.sparsifiner.evaluate import evaluate_vit
from bab.sparsifiner.train import ViTTrainConfig


def trained_with(lineage) -> ViTTrainConfig:
    """The training config a run's lineage keys (its difference from the defaults), whole again."""
    return ViTTrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in lineage["train"].items()})


# the tiny study's ViT has 2 layers: prune after the first; one epoch per fine-tune (the smoke profile's)
TINY_EVIT = dict(prune_layers=(0,), phase2=replace(get_profile("vit_sparsifiner", "smoke").phase2, batch_size=8))


def test_evit_fine_tunes_the_dense_model_with_its_tokens_pruned_through_the_cache(tiny_vit_study):
    study, data = tiny_vit_study(**TINY_EVIT)
    dense, _, dense_lineage = study.dense()
    model, metrics, lineage = study.evit(0.5)
    assert metrics["cached"] is False and len(metrics["history"]) == study.profile.evit_epochs
    assert lineage["parent"] == dense_lineage and lineage["model"] == dense_lineage["model"]
    train = trained_with(lineage)
    assert (train.objective, train.token_keep, train.prune_layers) == ("dense", 0.5, (0,))
    assert (train.epochs, train.lr, train.seed) == (study.profile.evit_epochs, 3e-4, study.profile.seed)
    assert any((p != q).any() for p, q in zip(model.parameters(), dense.parameters(), strict=True))
    again, metrics, _ = study.evit(0.5)
    assert metrics["cached"] is True
    assert all((p == q).all() for p, q in zip(again.parameters(), model.parameters(), strict=True))
    _, other, other_lineage = study.evit(0.7)  # another keep rate is another run
    assert other["cached"] is False and trained_with(other_lineage).token_keep == 0.7


def test_sparsif_evit_is_phase_two_with_its_tokens_pruned_from_phase_one_through_the_cache(tiny_vit_study):
    study, _ = tiny_vit_study(**TINY_EVIT)
    _, _, phase1_lineage = study.predictor()
    _, _, phase2_lineage = study.sparsifiner()
    model, metrics, lineage = study.evit_sparsifiner(0.5)
    assert metrics["cached"] is False
    assert lineage["parent"] == phase1_lineage and lineage["model"] == phase2_lineage["model"]
    # phase 2's recipe with the tokens pruned, for evit_epochs
    expected = replace(trained_with(phase2_lineage), epochs=study.profile.evit_epochs, token_keep=0.5,
                       prune_layers=(0,))
    assert trained_with(lineage) == expected
    _, metrics, _ = study.evit_sparsifiner(0.5)
    assert metrics["cached"] is True


def test_the_fine_tunes_epochs_leave_every_other_steps_run_where_it_was(tiny_vit_study):
    study, _ = tiny_vit_study(**TINY_EVIT)
    keys = [study.dense()[2], study.predictor()[2], study.sparsifiner()[2]]
    longer = study.with_profile(replace(study.profile, evit_epochs=2))
    for step, key in zip((longer.dense, longer.predictor, longer.sparsifiner), keys, strict=True):
        _, metrics, lineage = step()
        assert metrics["cached"] is True and lineage == key
    assert "evit_epochs" not in str(keys)
    _, metrics, lineage = longer.evit(0.5)
    assert metrics["cached"] is False and lineage["train"]["epochs"] == 2


def test_the_fine_tunes_rows_carry_their_outcomes_and_settings(tiny_vit_study):
    study, data = tiny_vit_study(**TINY_EVIT)
    p = study.profile
    evit, _, _ = study.evit(0.5)
    combo, _, _ = study.evit_sparsifiner(0.5)
    evit_stats = evaluate_vit(evit, data, token_keep=0.5, prune_layers=p.prune_layers)
    combo_stats = evaluate_vit(combo, data, attention="masked", keep_rate=p.combo_keep_rate, token_keep=0.5,
                               prune_layers=p.prune_layers)
    rows = [study.result_row(VIT_METHODS.evit_finetuned, 0.5, evit_stats, models=evit),
            study.result_row(VIT_METHODS.evit_sparsifiner_finetuned, p.combo_keep_rate, combo_stats,
                             settings={"token_keep": 0.5}, models=combo)]
    validate_rows(rows)
    assert [row["method"] for row in rows] == ["token pruning (EViT), fine-tuned", "EViT + sparsifiner, fine-tuned"]
    assert all(row["accuracy_n"] == len(data) and len(row["runs"]) == 1 for row in rows)
    # on 5 tokens the predictor costs more than it saves, so only EViT's cost is below dense here
    assert rows[1]["settings"] == {"token_keep": 0.5} and rows[0]["cost"] < 1.0


def test_every_profile_fine_tunes_a_few_epochs_and_the_paper_profile_as_long_as_phase_two():
    assert (VIT["smoke"].evit_epochs, VIT["quick"].evit_epochs) == (1, 4)
    assert VIT["paper"].evit_epochs == VIT["paper"].phase2.epochs == 40
    with pytest.raises(ValueError, match="evit_epochs must be a whole number of epochs >= 1"):
        replace(VIT["smoke"], evit_epochs=0)


def test_the_papers_table_1_numbers_stand_beside_the_fine_tuned_rows():
    from bab.report.results import paper

    paper.check_paper_rows(paper.SPARSIFINER)
    ours = [{"experiment": "vit_sparsifiner", "method": "token pruning (EViT), fine-tuned", "budget": 0.7,
             "cost": 0.6, "accuracy": 84.0, "speedup": None},
            {"experiment": "vit_sparsifiner", "method": "EViT + sparsifiner, fine-tuned", "budget": 0.25, "cost": 0.3,
             "accuracy": 84.5, "speedup": None, "settings": {"token_keep": 0.5}}]
    table = paper.comparison_table(ours)
    evit = table[(table.method == "token pruning (EViT), fine-tuned") & (table.budget == 0.7)].iloc[0]
    assert (evit["accuracy (ours)"], evit["accuracy (paper)"]) == (84.0, 79.5)
    combo = table[table.method == "EViT + sparsifiner, fine-tuned"].set_index("settings")
    assert (combo.loc["token_keep=0.5", "accuracy (ours)"], combo.loc["token_keep=0.5", "accuracy (paper)"]) == (
        84.5, 78.7)
    assert combo.loc["token_keep=0.7", "accuracy (paper)"] == 79.5
