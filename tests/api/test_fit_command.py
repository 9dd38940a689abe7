"""`python -m bab fit heads` end to end on a tiny random BERT folder, and its answer to every bad input."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import api_fixtures
import pandas as pd
import pytest
import torch
from api_topics import write_csv

from bab.__main__ import main
from bab.api import fit as fit_module
from bab.api.heads import BudgetedClassifier

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread
run_cache = api_fixtures.run_cache
tiny_encoder = api_fixtures.tiny_encoder
topic_csvs = api_fixtures.topic_csvs

def strict_loads(text):
    """json.loads that rejects NaN and infinities, as JSON.parse and jq do."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_intervals(sweep, recorded, n):
    """sweep.csv's and metrics.json's interval columns: each accuracy inside its interval, each difference from
    dense the difference of the two accuracies and inside its paired interval, none on the dense row."""
    columns = ["accuracy_low", "accuracy_high", "vs_dense", "vs_dense_low", "vs_dense_high", "n"]
    for table in (sweep, recorded):
        assert set(columns) <= set(table.columns)
        assert (table["n"] == n).all()
        assert ((table["accuracy_low"] <= table["accuracy"]) & (table["accuracy"] <= table["accuracy_high"])).all()
        assert (table["accuracy_low"] >= 0).all() and (table["accuracy_high"] <= 100).all()
        dense, rows = table.iloc[0], table.iloc[1:]
        assert dense["mode"] == "dense" and dense[["vs_dense", "vs_dense_low", "vs_dense_high"]].isna().all()
        assert rows["vs_dense"].tolist() == pytest.approx((rows["accuracy"] - dense["accuracy"]).tolist(), abs=1e-9)
        assert ((rows["vs_dense_low"] <= rows["vs_dense"]) & (rows["vs_dense"] <= rows["vs_dense_high"])).all()
    assert recorded[columns[:-1]].iloc[1:].to_numpy() == pytest.approx(sweep[columns[:-1]].iloc[1:].to_numpy())


FAST = ["--max-len", "16", "--batch-size", "8", "--epochs", "1,1,1", "--dense-lr", "3e-3", "--lr", "1e-3",
        "--timing-examples", "8", "--timing-repeats", "1", "--quiet"]


def test_fit_heads_writes_every_artefact(tiny_encoder, topic_csvs, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["fit", "heads", "--train", str(topic_csvs[0]), "--test", str(topic_csvs[1]), "--model",
                 str(tiny_encoder), "--budgets", "0.5,0.25", "--prune", "0.5", "--out", str(out), *FAST])
    assert code == 0
    printed = capsys.readouterr()
    # --quiet: how the model did and where it went, nothing else (no stage lines, estimates or transformers' bars)
    lines = printed.out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("wrote ") and "summary.html (0:" in lines[1]
    assert "\r" not in printed.err
    for name in ("gated/config.json", "gated/bab_gates.safetensors", "pruned-0.50/model.safetensors",
                 "pruned-0.50/tokenizer.json", "sweep.csv", "heatmap.png", "accuracy_cost.png", "latency.csv",
                 "metrics.json", "summary.html"):
        assert (out / name).is_file(), name
    sweep = pd.read_csv(out / "sweep.csv")
    assert sweep["mode"].tolist() == ["dense", "all heads", "soft", "soft", "hard", "hard"]
    assert sweep["budget"].tolist()[2:] == [0.25, 0.5, 0.25, 0.5]  # budgets sorted
    metrics = strict_loads((out / "metrics.json").read_text())
    # the headline: dense, each hard budget with its paired difference, the pruned model's speed
    hard = sweep[sweep["mode"] == "hard"].to_dict("records")
    assert lines[0] == metrics["headline"]
    assert lines[0].startswith(f"dense {sweep['accuracy'][0]:.1f}% [")
    assert all(f"hard @{r['budget']:.2f} {r['accuracy']:.1f}% [" in lines[0] for r in hard)
    assert "pruned @0.50: " in lines[0] and "x measured (analytic limit " in lines[0]
    check_intervals(sweep, pd.DataFrame(metrics["sweep"]), n=len(pd.read_csv(topic_csvs[1])))
    assert "paired" in metrics["intervals"]["vs_dense"] and metrics["intervals"]["confidence"] == 0.95
    strict_loads((out / "gated" / "bab_history.json").read_text())
    assert metrics["reload"]["gated_logits_max_abs_diff"] == 0.0
    assert metrics["reload"]["pruned_predictions_equal"] is True
    assert metrics["reload"]["pruned_id2label"] == {"0": "music", "1": "science", "2": "sports"}
    assert metrics["latency"]["config"] == ["dense", "pruned @0.50"]
    summary = (out / "summary.html").read_text()
    assert "<table" in summary and "<NA>" not in summary and "nan" not in summary.lower()
    for row in sweep[sweep["mode"] != "dense"].to_dict("records"):  # each difference says where it stands
        name = fit_module.MODE_NAMES[row["mode"]] + ("" if pd.isna(row["budget"]) else f" @{row['budget']:.2f}") + ": "
        if row["vs_dense_low"] == row["vs_dense_high"] == 0:
            assert name + "right and wrong on exactly the same" in summary
        elif row["vs_dense_low"] <= 0 <= row["vs_dense_high"]:
            assert name + f"on {len(pd.read_csv(topic_csvs[1]))} test texts a " in summary
            assert "-point difference is within noise" in summary
        else:
            assert name in summary and "beyond noise: the interval of " in summary
    assert f"Trained on <code>{topic_csvs[0]}</code> (" in summary
    assert f"test file <code>{topic_csvs[1]}</code>" in summary
    assert "<b>dense</b>: 1 epoch(s) of fine-tuning" in summary and "accuracy_cost.png" in summary
    # the latency is timed at the recipe's length (--max-len 16) unless --timing-len says otherwise, as latency()
    assert "length 16" in metrics["latency"]["shape"]
    assert metrics["reported_on"] == "test"
    # the written checkpoint sweeps to the same numbers; it has no dense fine-tune with it, so its differences are
    # taken from the fitted model with every head, and the table says so
    again = BudgetedClassifier.from_pretrained(out / "gated").sweep(topic_csvs[1], budgets=[0.25, 0.5])
    assert again["mode"].tolist() == sweep["mode"].tolist()[1:] and again.attrs["reference"] == "all heads"
    assert again["accuracy"].tolist() == pytest.approx(sweep["accuracy"].tolist()[1:])


@pytest.mark.parametrize("change, message", [
    ({"--train": "missing.csv"}, "CSV file not found: missing.csv"),
    ({"--train": "cols.csv"}, r"cols.csv has the columns \['sentence', 'label'\] but lacks \['text'\].*--text-column"),
    ({"--train": "empty_text.csv"}, r"line 3: the text column\(s\) \['text'\] are empty.*--skip-malformed"),
    ({"--train": "one_class.csv"}, "has one class only \\('a'\\)"),
    ({"--test": "unseen.csv"}, r"label\(s\) \['politics'\] that the training labels"),
    ({"--budgets": "0.5,1.5"}, "budget must lie in \\(0, 1\\]"),
    ({"--budgets": "0"}, "budget must lie in \\(0, 1\\]"),
    ({"--budgets": "half"}, "--budgets must be comma-separated numbers"),
    ({"--prune": "-0.5"}, "budget must lie in \\(0, 1\\]"),
    ({"--model": "./no/such/model"}, "model directory './no/such/model' does not exist"),
    ({"--model": "someone/unknown-model"}, "could not load encoder 'someone/unknown-model'"),
    ({"--epochs": "2,1"}, "--epochs must be three integers"),
    ({"--train": "one_class.csv", "--test": ""}, "has one class only"),
    ({"--train": "few.csv", "--test": ""}, "too few to hold out a validation split"),
])
def test_bad_inputs_exit_2_with_the_fix(tiny_encoder, topic_csvs, tmp_path, monkeypatch, capsys, change, message):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "cols.csv", [("x y", "a"), ("z", "b")], header=("sentence", "label"))
    write_csv(tmp_path / "empty_text.csv", [("x y", "a"), ("   ", "b")])
    write_csv(tmp_path / "one_class.csv", [("x y", "a"), ("z", "a")])
    write_csv(tmp_path / "unseen.csv", [("goal match", "sports"), ("vote law", "politics")])
    write_csv(tmp_path / "few.csv", [("goal match", "sports"), ("song album", "music")])
    args = {"--train": str(topic_csvs[0]), "--test": str(topic_csvs[1]), "--model": str(tiny_encoder),
            "--out": str(tmp_path / "out")}
    options = dict(zip(FAST[::2], FAST[1::2], strict=False))  # FAST ends with the flag --quiet (no value)
    merged = {**args, **options, **change}
    argv = [x for key, value in merged.items() if value != "" for x in (key, value)] + ["--quiet"]
    code = main(["fit", "heads", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("python -m bab fit heads: error: ")
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()  # nothing written before the inputs were all checked


def test_without_a_test_file_it_reports_on_the_held_out_validation(tiny_encoder, topic_csvs, tmp_path):
    out = tmp_path / "run"
    assert main(["fit", "heads", "--train", str(topic_csvs[0]), "--model", str(tiny_encoder), "--prune", "0",
                 "--out", str(out), *FAST]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["reported_on"].startswith("validation")
    assert "latency" not in metrics and not (out / "latency.csv").exists()  # --prune 0: nothing pruned or timed
    assert len(pd.read_csv(out / "sweep.csv")) == 8  # dense, all heads + soft and hard at the three default budgets


def test_a_non_empty_out_is_kept_unless_overwrite_and_replaced_only_when_complete(tiny_encoder, topic_csvs,
                                                                                  tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["fit", "heads", "--train", str(topic_csvs[0]), "--test", str(topic_csvs[1]), "--model",
            str(tiny_encoder), "--budgets", "0.5,0.25", "--prune", "0.5", "--out", str(out), *FAST]

    def untouched():
        return sorted(p.name for p in tmp_path.iterdir()) == ["run"] and (out / "notes.txt").read_text() == "mine"

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--out " + str(out) + " is not empty (it holds notes.txt); pass --overwrite" in err
    assert "or choose another folder" in err
    assert untouched()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the last file is written
    monkeypatch.setattr(fit_module, "summary_html", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main([*argv, "--overwrite"])
    assert untouched()  # the old folder as it was, and no staging folder left beside it
    monkeypatch.undo()

    assert main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert not (out / "notes.txt").exists() and (out / "summary.html").is_file()
    assert (out / "pruned-0.50" / "modeling_pruned.py").is_file()


@pytest.mark.parametrize("command, shown", [
    (["fit", "heads"], ["(default: 0.25,0.5,0.75)", "(default: 2,1,2)", "(default: 13)", "(default: 0.1)",
                        "--overwrite"]),
    (["bench", "heads"], ["(default: 1,64)", "(default: 20)"]),
    (["bench", "bert"], ["(default: 1,16)", "(default: 5)"]),
    (["bench", "sparse"], ["(default: 197,577,1025)", "(default: 32)", "(default: 1,64)",
                           "(default: 15; with --model 3)"]),
    (["bench", "generation"], ["(default: gpt2)", "(default: the profile's)"]),
])
def test_help_shows_the_defaults(command, shown, capsys):
    assert main([*command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for piece in shown:
        assert piece in text, piece
    assert "(default: None)" not in text and "(default: False)" not in text


def test_bab_is_a_console_script():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["bab"] == "bab.__main__:main"
    script = Path(sys.executable).with_name("bab")
    if not script.is_file():
        pytest.skip(f"{script} is not installed here: pip install -e . (re)creates it")
    result = subprocess.run([str(script), "fit", "heads", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: bab fit heads")


def test_the_command_and_the_api_train_the_same_model(tiny_encoder, topic_csvs, tmp_path):
    """`fit heads` is BudgetedClassifier.fit with the same recipe: its defaults are the Recipe's, its options map onto
    the Recipe's fields, and the API fitted on the same CSV (no run cache: trained here again) gives the same
    weights, gates and dense fine-tune."""
    from safetensors.torch import load_file

    from bab.heads.evaluate import evaluate
    from bab.heads.recipe import Recipe

    parser_defaults = {a.dest: a.default for a in _fit_heads_parser()._actions}
    recipe = Recipe()
    assert parser_defaults["epochs"] == f"{recipe.dense_epochs},{recipe.budgeted_epochs},{recipe.hard_epochs}"
    for option in ("max_len", "batch_size", "lr", "dense_lr", "seed", "budget_min"):
        assert parser_defaults[option] == getattr(recipe, option), option
    out = tmp_path / "cli"
    assert main(["fit", "heads", "--train", str(topic_csvs[0]), "--test", str(topic_csvs[1]), "--model",
                 str(tiny_encoder), "--budgets", "0.5", "--prune", "0", "--out", str(out), *FAST]) == 0
    api = BudgetedClassifier.from_pretrained(str(tiny_encoder), max_len=16, batch_size=8, dense_epochs=1,
                                             budgeted_epochs=1, hard_epochs=1, dense_lr=3e-3, lr=1e-3)
    api.fit(topic_csvs[0], progress=False, cache=False)
    written = load_file(out / "gated" / "model.safetensors")
    state = api.model.hf.state_dict()
    assert set(written) <= set(state)
    assert all(torch.equal(written[name], state[name]) for name in written)
    gates = load_file(out / "gated" / "bab_gates.safetensors")
    assert all(torch.equal(gates[name], value) for name, value in api.model.gates.state_dict().items())
    sweep = pd.read_csv(out / "sweep.csv")
    dense = evaluate(api.dense_model, api.dataset(topic_csvs[1]))
    assert sweep.loc[0, "mode"] == "dense" and sweep.loc[0, "accuracy"] == pytest.approx(dense["accuracy"])


def _fit_heads_parser():
    from bab.__main__ import build_parser

    parser = build_parser()
    fit = next(a for a in parser._subparsers._group_actions if "fit" in a.choices).choices["fit"]
    return next(a for a in fit._subparsers._group_actions if "heads" in a.choices).choices["heads"]
