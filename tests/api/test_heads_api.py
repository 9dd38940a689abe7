"""BudgetedClassifier end to end on a tiny random BERT folder: fit, sweep, predict, prune, save and reload.

References are independent of the API: the pruned model is run through transformers' own forward, the
reloaded checkpoint through AutoModelForSequenceClassification, head counts are computed by hand.
"""

import math

import api_fixtures
import pandas as pd
import pytest
import torch
from api_topics import topic_texts, write_csv
from transformers import AutoModelForSequenceClassification

from bab.api import BudgetedClassifier, GateStart, Recipe
from bab.heads.evaluate import evaluate
from bab.heads.hf_pruning import kept_heads, load_pruned

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread
run_cache = api_fixtures.run_cache
tiny_encoder = api_fixtures.tiny_encoder
topic_csvs = api_fixtures.topic_csvs

FAST = dict(max_len=16, batch_size=8, dense_epochs=3, budgeted_epochs=1, hard_epochs=1, dense_lr=1e-2, lr=1e-3)


@pytest.fixture(scope="module")
def fitted(tiny_encoder, topic_csvs):
    torch.manual_seed(0)
    clf = BudgetedClassifier.from_pretrained(str(tiny_encoder), **FAST)
    clf.fit(topic_csvs[0], hard_budgets=[0.5, 0.75], progress=False)
    return clf


def plain_logits(hf_model, tokenizer, texts, max_len):
    """Logits of a plain transformers classifier, through its own forward (input_ids, attention_mask)."""
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
    with torch.no_grad():
        return hf_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits


def test_fit_learns_the_labels_in_sorted_order_and_beats_chance(fitted, topic_csvs):
    assert fitted.labels == ["music", "science", "sports"]
    assert set(fitted.history) == {"dense", "budgeted", "hard"}
    dense = fitted.evaluate(topic_csvs[1])
    assert dense["accuracy"] > 100 / 3 + 20  # three balanced classes: chance is 33%


def test_sweep_rows_and_hard_head_counts_by_hand(fitted, topic_csvs):
    sweep = fitted.sweep(topic_csvs[1], budgets=[0.1, 0.25, 0.5, 1.0])
    # the dense fine-tune the gates started from, then the fitted model with every head, then the budgets
    assert list(sweep["mode"]) == ["dense", "all heads"] + ["soft"] * 4 + ["hard"] * 4
    assert sweep.loc[0, "accuracy"] == pytest.approx(evaluate(fitted.dense_model, fitted.dataset(topic_csvs[1]))
                                                     ["accuracy"])
    hard = sweep[sweep["mode"] == "hard"].set_index("budget")
    # 2 layers x 4 heads: k = ceil(b * 8), at least one head per layer -> max(k, 2)
    assert hard.heads_kept.to_dict() == {0.1: 2, 0.25: 2, 0.5: 4, 1.0: 8}
    assert hard.cost.tolist() == pytest.approx([2 / 8, 2 / 8, 4 / 8, 1.0])
    assert pd.isna(sweep.loc[0, "budget"]) and sweep.loc[0, "cost"] == 1.0
    # each row's difference from the dense row, in points, inside its paired interval; none on the dense row
    assert sweep["n"].tolist() == [30] * 10 and pd.isna(sweep.loc[0, "vs_dense"])
    rows = sweep.iloc[1:]
    assert rows["vs_dense"].tolist() == pytest.approx((rows["accuracy"] - sweep.loc[0, "accuracy"]).tolist())
    assert ((rows["vs_dense_low"] <= rows["vs_dense"]) & (rows["vs_dense"] <= rows["vs_dense_high"])).all()
    assert ((sweep["accuracy_low"] <= sweep["accuracy"]) & (sweep["accuracy"] <= sweep["accuracy_high"])).all()


def test_hard_prediction_is_the_pruned_transformers_model(fitted, topic_csvs):
    texts = [t for t, _ in topic_texts(5, seed=3)]
    for budget in (0.25, 0.5):
        pruned = fitted.prune(budget)
        assert [len(h) for h in kept_heads(pruned)] == fitted.head_mask(budget).sum(1).int().tolist()
        assert pruned.config.id2label == {0: "music", 1: "science", 2: "sports"}
        logits = plain_logits(pruned, fitted.tokenizer.hf, texts, fitted.recipe.max_len)
        assert torch.allclose(fitted.logits(texts, budget), logits, atol=1e-5)
        assert fitted.predict(texts, budget) == [pruned.config.id2label[i] for i in logits.argmax(-1).tolist()]
    # the sweep's hard accuracy at 0.5 is the pruned model's accuracy, counted here in a loop
    test = pd.read_csv(topic_csvs[1])
    pruned = fitted.prune(0.5)
    logits = plain_logits(pruned, fitted.tokenizer.hf, test.text.tolist(), fitted.recipe.max_len)
    correct = sum(pruned.config.id2label[int(i)] == y for i, y in zip(logits.argmax(-1), test.label, strict=True))
    assert fitted.evaluate(topic_csvs[1], 0.5)["accuracy"] == pytest.approx(100 * correct / len(test))


def test_gated_checkpoint_reloads_equal(fitted, tmp_path):
    texts = [t for t, _ in topic_texts(4, seed=4)]
    fitted.save_pretrained(tmp_path / "gated")
    again = BudgetedClassifier.from_pretrained(tmp_path / "gated")
    assert again.labels == fitted.labels and again.recipe == fitted.recipe and again.history == fitted.history
    for budget, mode in ((None, "dense"), (0.3, "soft"), (0.3, "hard"), (0.75, "hard")):
        assert torch.equal(again.logits(texts, budget, mode), fitted.logits(texts, budget, mode))
    # the folder is also a plain transformers checkpoint: the dense classifier, with the label names
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "gated").eval()
    assert plain.config.id2label[2] == "sports"
    assert torch.allclose(plain_logits(plain, fitted.tokenizer.hf, texts, 16), fitted.logits(texts), atol=1e-5)


def test_pruned_model_reloads_equal_with_label_names(fitted, tmp_path):
    texts = [t for t, _ in topic_texts(4, seed=5)]
    folder = fitted.save_pruned(0.5, tmp_path / "pruned")
    reloaded = load_pruned(folder)
    assert reloaded.config.id2label == {0: "music", 1: "science", 2: "sports"}
    assert torch.equal(plain_logits(reloaded, fitted.tokenizer.hf, texts, 16).argmax(-1),
                       fitted.logits(texts, 0.5).argmax(-1))
    with pytest.raises(ValueError, match="pruned model.*bab.load_pruned"):
        BudgetedClassifier.from_pretrained(folder)


def test_label_mapping_is_reused_and_unseen_labels_raise(fitted, tmp_path):
    rows = topic_texts(2, seed=6)
    frame = pd.DataFrame(rows, columns=["text", "label"])
    assert fitted.dataset(frame).tensors[1].tolist().count(fitted.labels.index("sports")) == 2
    odd = write_csv(tmp_path / "odd.csv", rows + [("a new kind of text", "politics")])
    with pytest.raises(ValueError, match=r"label\(s\) \['politics'\].*do not include"):
        fitted.sweep(odd, budgets=[0.5])


def test_datasets_input_keeps_classlabel_names(tiny_encoder):
    datasets = pytest.importorskip("datasets")
    rows = topic_texts(12, seed=7)
    names = ["music", "science", "sports"]
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)})
    data = datasets.Dataset.from_dict({"text": [t for t, _ in rows], "label": [names.index(y) for _, y in rows]},
                                      features=features)
    splits = data.train_test_split(test_size=0.25, seed=0)
    clf = BudgetedClassifier.from_pretrained(str(tiny_encoder), **{**FAST, "dense_epochs": 1, "hard_epochs": 0})
    clf.fit(datasets.DatasetDict({"train": splits["train"], "validation": splits["test"]}), progress=False)
    assert clf.labels == names
    assert set(clf.predict(["goal match team"], budget=0.5)) <= set(names)


def test_integer_labels_with_names_are_positions(tiny_encoder):
    rows = topic_texts(6, seed=8)
    names = ["music", "science", "sports"]
    frame = pd.DataFrame({"text": [t for t, _ in rows], "label": [names.index(y) for _, y in rows]})
    clf = BudgetedClassifier.from_pretrained(str(tiny_encoder), labels=names,
                                             **{**FAST, "dense_epochs": 1, "hard_epochs": 0})
    clf.fit(frame, progress=False)
    assert clf.labels == names
    assert clf.dataset(frame).tensors[1].sort().values.tolist() == sorted(frame.label)


@pytest.mark.parametrize("make, error, message", [
    (lambda d: d / "missing.csv", FileNotFoundError, "CSV file not found"),
    (lambda d: write_csv(d / "cols.csv", [("x", "a"), ("y", "b")], header=("sentence", "label")),
     ValueError, r"lacks \['text'\]; name the text and label columns with text_column="),
    (lambda d: write_csv(d / "empty.csv", [("x y", "a"), ("  ", "b")]), ValueError, "line 3: the text column"),
    (lambda d: write_csv(d / "one.csv", [("x y", "a"), ("z", "a")]), ValueError, "one class only"),
    (lambda d: pd.DataFrame({"text": ["a", None], "label": ["x", "y"]}), ValueError,
     r"empty \(or not text\) in rows \[1\]"),
    (lambda d: pd.DataFrame({"words": ["a"], "label": ["x"]}), ValueError, "lacks \\['text'\\]; name the text"),
    (lambda d: 42, TypeError, "must be a CSV path, a pandas DataFrame"),
])
def test_bad_training_data_says_what_to_fix(tiny_encoder, tmp_path, make, error, message):
    clf = BudgetedClassifier.from_pretrained(str(tiny_encoder), **FAST)
    with pytest.raises(error, match=message):
        clf.fit(make(tmp_path), progress=False)


def test_a_second_fit_is_served_from_the_run_cache(tiny_encoder, topic_csvs, tmp_path, monkeypatch):
    import bab.experiments.pipelines.heads as heads_study

    recipe = {**FAST, "dense_epochs": 1, "hard_epochs": 2}
    first = BudgetedClassifier.from_pretrained(str(tiny_encoder), **recipe).fit(topic_csvs[0], progress=False,
                                                                                 cache=tmp_path)
    runs = sorted(p.name.rsplit("-", 1)[0] for p in tmp_path.iterdir() if p.is_dir() and p.name != "partial")
    assert runs == ["own_data-dense", "own_data-hard", "own_data-warm"]
    monkeypatch.setattr(heads_study, "train", lambda *a, **k: pytest.fail("a cached stage was trained again"))
    again = BudgetedClassifier.from_pretrained(str(tiny_encoder), **recipe).fit(topic_csvs[0], progress=False,
                                                                                 cache=tmp_path)
    assert again.history == first.history and again.model.min_per_layer == 1
    texts = [t for t, _ in topic_texts(4, seed=9)]
    for budget in (None, 0.5):
        assert torch.equal(again.logits(texts, budget), first.logits(texts, budget))


def test_bad_budgets_models_and_order_of_calls(fitted, tiny_encoder):
    for budget in (0.0, 1.5, -0.2, math.nan):
        with pytest.raises(ValueError, match=r"budget"):
            fitted.predict(["goal"], budget)
    with pytest.raises(ValueError, match="budget"):
        fitted.prune(0)
    with pytest.raises(OSError, match="does not exist"):
        BudgetedClassifier.from_pretrained("./no/such/model")
    with pytest.raises(ValueError, match="call fit"):
        BudgetedClassifier.from_pretrained(str(tiny_encoder)).predict(["goal"])


def test_heatmap_and_latency_table(fitted):
    fig = fitted.heatmap(budgets=(0.25, 1.0))
    assert len([ax for ax in fig.axes if ax.get_visible() and ax.get_title()]) == 2
    table = fitted.latency(0.5, examples=8, batch_size=4, repeats=1, warmup=0)
    assert list(table.index) == ["dense", "pruned @0.50"]
    assert table.loc["dense", "speedup"] == 1.0 and table.loc["pruned @0.50", "analytic_limit"] > 1.0


def test_default_recipe_is_the_hard_adaptation_recipe_of_the_notebooks():
    # the hard-adaptation recipe: nested gate start and two-sided term in the soft phase, the per-layer floor the
    # API's hard mode and structural pruning use, and the unadapted checkpoint kept when adaptation does not help
    configs = Recipe().train_configs(hard_budgets=[0.25, 0.5])
    soft, hard = configs["budgeted"], configs["hard"]
    assert (soft.gate_start.how, soft.two_sided, soft.gate_start.examples) == ("ablation", True, 128)
    adaptation = hard.adaptation
    assert (hard.epochs, adaptation.min_per_layer, adaptation.keep_unadapted, adaptation.freeze_gates) == (
        2, 1, True, True)
    assert soft.batch_size == hard.batch_size == Recipe().batch_size  # the global batch: the loop splits it
    flat = Recipe(gate_start=GateStart("flat"), two_sided=False).train_configs()["budgeted"]
    assert (flat.gate_start.how, flat.two_sided) == ("flat", False)
    with pytest.raises(ValueError, match="GateStart.how must be one of"):
        Recipe(gate_start=GateStart("importance"))
    # the former flat spellings say the new one
    with pytest.raises(ValueError, match=r"gate_start=GateStart\('flat'\)"):
        Recipe(gate_start="flat")
    with pytest.raises(ValueError, match=r"gate_start=GateStart\(how=\.\.\., examples=64\)"):
        Recipe().overridden(**{"gate_start_" + "examples": 64})  # the former flat name
    assert Recipe().overridden(max_len=64).max_len == 64


def test_a_saved_recipe_reads_back_nested_or_as_written_before_the_gate_start_was_nested():
    from dataclasses import asdict

    recipe = Recipe(gate_start=GateStart("elimination", sharpness=8.0, examples=64), kd_beta=0.9)
    assert Recipe.from_dict(asdict(recipe)) == recipe
    before = {k: v for k, v in asdict(Recipe()).items() if k != "gate_start"}
    older = {**before, "gate_start": "random", "gate_start_" + "examples": 32, "an option of a newer bab": 1}
    assert Recipe.from_dict(older) == Recipe(gate_start=GateStart("random", examples=32))


def test_a_transformers_model_object_fits_as_its_saved_folder_does(tiny_encoder, topic_csvs, tmp_path):
    """The tiny BERT loaded as an object (with its tokenizer) fits to the same logits as the same encoder named by its
    folder, and is written once to the run cache's encoders/."""
    from transformers import AutoModel, AutoTokenizer

    recipe = {**FAST, "dense_epochs": 1, "hard_epochs": 1}
    encoder, tokenizer = AutoModel.from_pretrained(tiny_encoder), AutoTokenizer.from_pretrained(tiny_encoder)
    with pytest.raises(ValueError, match="needs its tokenizer"):
        BudgetedClassifier.from_pretrained(encoder)
    with pytest.raises(ValueError, match="goes with a model object"):
        BudgetedClassifier.from_pretrained(str(tiny_encoder), tokenizer=tokenizer)
    torch.manual_seed(0)
    by_object = BudgetedClassifier.from_pretrained(encoder, tokenizer=tokenizer, **recipe).fit(
        topic_csvs[0], progress=False, cache=tmp_path / "a")
    torch.manual_seed(0)
    by_folder = BudgetedClassifier.from_pretrained(str(tiny_encoder), **recipe).fit(topic_csvs[0], progress=False,
                                                                                     cache=tmp_path / "b")
    texts = [t for t, _ in topic_texts(4, seed=9)]
    for budget in (None, 0.5):
        assert torch.equal(by_object.logits(texts, budget), by_folder.logits(texts, budget))
    folders = list((run_cache_root() / "encoders").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("bert-")
    BudgetedClassifier.from_pretrained(encoder, tokenizer=tokenizer)  # the same object again: no second folder
    assert len(list((run_cache_root() / "encoders").iterdir())) == 1


def run_cache_root():
    """The module's run cache (api_fixtures.run_cache sets $BAB_CACHE_DIR)."""
    import os
    from pathlib import Path

    return Path(os.environ["BAB_CACHE_DIR"])
