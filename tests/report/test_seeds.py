"""Notebooks run once per seed: the report's runs, names and pages, and the rows averaged over the seeds."""

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import nbformat
import pytest

import bab.report.runner.build as report
from bab.experiments.profiles import get_profile
from bab.experiments.synthetic import SyntheticExperiment
from bab.report.results import seeds
from bab.report.results.record import write_record
from tests.report.test_report import ROOT, fake_paper


def row(method, budget, accuracy, runs, seed, **extra):
    return {"experiment": "synthetic", "method": method, "budget": budget, "cost": budget, "accuracy": accuracy,
            "speedup": None, "runs": runs, "seeds": [seed], **extra}


SCRATCH_MEAN = dict(accuracy_std=7.5, settings=None)  # the from-scratch mean row every seed's run writes alike


def three_seeds():
    """Rows of three seed runs: the dense row and a warm row measured on each seed's own model, the from-scratch
    mean row on the same three models in every run, and a row only seeds 7 and 21 wrote."""
    out = {}
    for seed, dense, warm in ((7, 99.0, 80.0), (13, 98.0, 82.0), (21, 100.0, 90.0)):
        rows = [row("dense", 1.0, dense, [f"dense-{seed}"], seed, trained_at=[f"c{seed}"], cache_hits=1),
                row("warm-start budgeted", 0.5, warm, [f"warm-{seed}"], seed, speedup=1.0 + seed / 100,
                    accuracy_low=1.0, accuracy_high=2.0, accuracy_n=50.0, trained_at=["c0"], cache_hits=0),
                {**row("budgeted from scratch", 0.5, 85.1, ["s7", "s13", "s21"], 7), "seeds": [7, 13, 21],
                 "accuracy_std": 7.5}]
        if seed != 13:
            rows.append(row("warm-start static", 0.5, 95.0 + seed / 7, [f"static-{seed}"], seed))
        out[seed] = rows
    return out


def test_rows_of_different_models_are_averaged_and_of_the_same_models_kept_once():
    averaged = {(r["method"], r["budget"]): r for r in seeds.average_seed_rows(three_seeds())}
    assert list(averaged) == [("dense", 1.0), ("warm-start budgeted", 0.5), ("budgeted from scratch", 0.5),
                              ("warm-start static", 0.5)]
    warm = averaged["warm-start budgeted", 0.5]
    # by hand: mean (80 + 82 + 90) / 3 = 84; deviations -4, -2, 6: sample std sqrt((16 + 4 + 36) / 2) = sqrt(28)
    assert warm["accuracy"] == pytest.approx(84.0) and warm["accuracy_std"] == pytest.approx(math.sqrt(28))
    assert warm["cost"] == pytest.approx(0.5) and warm["speedup"] == pytest.approx(1.0 + 41 / 300)
    assert warm["runs"] == ["warm-7", "warm-13", "warm-21"] and warm["seeds"] == [7, 13, 21]
    assert warm["trained_at"] == ["c0"] and warm["cache_hits"] == 0
    assert not {"accuracy_low", "accuracy_high", "accuracy_n"} & set(warm)  # one measurement's interval: not a mean
    dense = averaged["dense", 1.0]
    assert dense["accuracy"] == pytest.approx(99.0) and dense["accuracy_std"] == pytest.approx(1.0)
    assert dense["trained_at"] == ["c7", "c13", "c21"] and dense["cache_hits"] == 3
    assert dense["speedup"] is None  # a column no seed measured stays unmeasured
    scratch = averaged["budgeted from scratch", 0.5]  # the same three models in every run: read once, not averaged
    assert scratch["accuracy"] == 85.1 and scratch["accuracy_std"] == 7.5 and scratch["seeds"] == [7, 13, 21]
    static = averaged["warm-start static", 0.5]  # seed 13's run has no such row: the mean of the two that do
    assert static["accuracy"] == pytest.approx(95.0 + 2) and static["seeds"] == [7, 21]


def test_seed_table_lists_each_seeds_accuracy_of_the_averaged_rows():
    table = seeds.seed_table(three_seeds())
    assert [(r["method"], r["budget"]) for r in table] == [("dense", 1.0), ("warm-start budgeted", 0.5),
                                                          ("warm-start static", 0.5)]
    assert table[1]["accuracy"] == {7: 80.0, 13: 82.0, 21: 90.0} and table[1]["mean"] == pytest.approx(84.0)
    assert table[2]["accuracy"] == {7: 96.0, 13: None, 21: 98.0}


def test_results_files_of_seed_runs_combine_under_their_notebook():
    runs = three_seeds()
    results = {"05_vit": (2, [row("dense", 1.0, 70.0, ["vit"], 1)]),
               **{f"01_synthetic-seed{seed}": (2, rows) for seed, rows in runs.items()},
               "02_ag-seed7": (1, [row("dense", 1.0, 50.0, ["old"], 7)]),  # an older contract ...
               "02_ag-seed13": (2, [row("dense", 1.0, 60.0, ["a"], 13)]),
               "02_ag-seed21": (2, [row("dense", 1.0, 62.0, ["b"], 21)])}
    combined, by_seed = seeds.combine_seed_results(results)
    assert sorted(combined) == ["01_synthetic", "02_ag", "05_vit"]
    assert combined["05_vit"] == results["05_vit"]
    assert combined["01_synthetic"] == (2, seeds.average_seed_rows(runs))
    assert sorted(by_seed) == ["01_synthetic", "02_ag"] and sorted(by_seed["02_ag"]) == [13, 21]
    assert combined["02_ag"][1][0]["accuracy"] == pytest.approx(61.0)  # ... is left out of the mean


def test_names_and_the_profiles_seeds():
    assert seeds.seed_stem("02_ag_news_custom", 7) == "02_ag_news_custom-seed7"
    assert seeds.seed_stem("02_ag_news_custom", None) == "02_ag_news_custom"
    assert seeds.split_seed_stem("02_ag_news_custom-seed21") == ("02_ag_news_custom", 21)
    assert seeds.split_seed_stem("07_pretrained_decoder_context_pruning") == ("07_pretrained_decoder_context_pruning",
                                                                              None)
    # the paper averages seeds 7 / 13 / 21 for the synthetic and the custom AG News tables; the paper profile runs
    # the pretrained encoders and the GPT-2 study at the same seeds, and the two longest notebooks once
    for stem in ("01_synthetic", "02_ag_news_custom", "03_bert_ag_news", "04_dbpedia_bert", "06_gpt2_context_pruning"):
        assert seeds.notebook_seeds(stem, "paper") == (7, 13, 21)
        assert seeds.notebook_seeds(stem, "quick") == ()
    assert seeds.notebook_seeds("05_vit_sparsifiner", "paper") == ()
    assert seeds.notebook_seeds("07_pretrained_decoder_context_pruning", "paper") == ()
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb"))
    assert set(seeds.SEEDED_NOTEBOOKS) <= set(notebooks)
    # the record runs every notebook at the three seeds, one run per (notebook, seed)
    assert len(notebooks) == 7
    for stem in notebooks:
        assert seeds.notebook_seeds(stem, "record") == (7, 13, 21), stem
        assert seeds.notebook_seeds(stem, "smoke") == ()
    record = report.notebook_runs([ROOT / "notebooks" / f"{stem}.ipynb" for stem in notebooks], "record")
    assert [r.stem for r in record] == [f"{stem}-seed{seed}" for stem in notebooks for seed in (7, 13, 21)]
    runs = report.notebook_runs([ROOT / "notebooks" / f"{stem}.ipynb" for stem in notebooks], "paper")
    assert [r.stem for r in runs][:4] == ["01_synthetic-seed7", "01_synthetic-seed13", "01_synthetic-seed21",
                                          "02_ag_news_custom-seed7"]
    assert len(runs) == len(notebooks) + 2 * 5  # five notebooks at three seeds each


def test_the_synthetic_study_takes_its_optimisation_seed():
    profile = get_profile("synthetic", "paper")
    assert SyntheticExperiment(profile, cache=False).default_seed == profile.opt_seeds[0]
    study = SyntheticExperiment(profile, cache=False, seed=21)
    assert study.default_seed == 21 and study.data_config().seed == profile.data_seeds[0]  # the data stay
    with pytest.raises(ValueError, match="seed must be a whole number"):
        SyntheticExperiment(profile, cache=False, seed="7")


def test_runs_at_different_seeds_train_their_own_seeds_dense_models_first(monkeypatch):
    import bab.experiments.synthetic.study as synthetic_study

    profile = get_profile("synthetic", "paper")
    study = SyntheticExperiment(profile, cache=False, seed=13)
    assert study.own_seed_first((7, 13, 21)) == [13, 7, 21]
    trained = []

    def dense(data_seed, opt_seed):
        trained.append((data_seed, opt_seed))
        return f"model {data_seed} {opt_seed}", {"train_seconds": 1.0, "cached": False}, {}

    monkeypatch.setattr(study, "dense", dense)
    monkeypatch.setattr(study, "data", lambda d: (None, f"val {d}"))
    monkeypatch.setattr(synthetic_study, "evaluate", lambda model, data: {"accuracy": float(model.split()[2])})
    grid = study.dense_grid()
    assert trained[:3] == [(7, 13), (13, 13), (21, 13)]  # this run's seed first: what its warm start needs
    assert sorted(trained) == [(d, o) for d in (7, 13, 21) for o in (7, 13, 21)]
    # the table keeps the profile's order
    assert list(zip(grid.data_seed, grid.opt_seed, strict=True)) == [(d, o) for d in (7, 13, 21) for o in (7, 13, 21)]
    assert list(grid.accuracy) == [float(o) for _ in (7, 13, 21) for o in (7, 13, 21)]


SEEDED_CODE = """\
from bab.report.results.contract import write_json_atomic
accuracy = {None: 70.0, 7: 80.0, 13: 82.0, 21: 90.0}[seed]
rows = [{"experiment": "synthetic", "method": "warm-start budgeted", "budget": 0.5, "cost": 0.5,
         "accuracy": accuracy, "speedup": None, "runs": [f"warm-{seed}"], "seeds": [seed]}]
write_json_atomic(results_path, {"notebook": "01_ok", "contract": 2, "rows": rows})
print("seed", seed)
"""


def write_seeded_notebook(path):
    params = nbformat.v4.new_code_cell('profile = "smoke"\nresults_path = None\ninteractive = True\nseed = None')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(SEEDED_CODE)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


# slow (about 25 s): papermill starts a kernel for each of four runs (three seeds, then one) and pages are written
@pytest.mark.slow
def test_a_report_runs_a_seeded_notebook_once_per_seed_and_reads_the_mean(tmp_path, monkeypatch):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    write_seeded_notebook(nb_dir / "01_ok.ipynb")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setitem(sys.modules, "bab.report.results.paper", fake_paper())
    monkeypatch.setattr(report, "notebook_seeds", lambda stem, profile: (7, 13, 21) if profile == "paper" else ())
    out = tmp_path / "reports" / "paper"
    (out / "runs").mkdir(parents=True)  # a single-seed run left from before: replaced by the seed runs
    (out / "runs" / "01_ok.json").write_text(json.dumps({"notebook": "01_ok", "status": "ok", "seconds": 1.0}))
    (out / "results.json").write_text("{}")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = report.build_report("paper", nb_dir, tmp_path / "reports", only="01", jobs=1)
    assert code == 0, stdout.getvalue()
    assert "[1/3] 01_ok-seed7 ... " in stdout.getvalue() and "[3/3] 01_ok-seed21 ... ok" in stdout.getvalue()
    for seed in (7, 13, 21):
        executed = nbformat.read(str(out / f"01_ok-seed{seed}.ipynb"), as_version=4)
        assert executed.cells[-1].outputs[0]["text"].strip() == f"seed {seed}"  # the parameter reached the kernel
        assert json.loads((out / "runs" / f"01_ok-seed{seed}.json").read_text())["seed"] == seed
        assert (out / f"01_ok-seed{seed}.html").exists()
    assert not (out / "runs" / "01_ok.json").exists()
    merged = json.loads((out / "results.json").read_text())
    assert merged["notebooks"] == {"01_ok-seed7": "ok", "01_ok-seed13": "ok", "01_ok-seed21": "ok"}
    [mean] = merged["rows"]
    assert mean["notebook"] == "01_ok" and mean["seeds"] == [7, 13, 21]
    assert mean["accuracy"] == pytest.approx(84.0) and mean["accuracy_std"] == pytest.approx(math.sqrt(28))
    assert sorted(merged["seed_rows"]["01_ok"]) == ["13", "21", "7"]
    index = (out / "index.html").read_text()
    assert all(f"01_ok-seed{seed}.html" in index for seed in (7, 13, 21))
    record = write_record(out, nb_dir).read_text()
    assert "## Seeds" in record and "| warm-start budgeted | 0.5 | – | 80 | 82 | 90 | 84 ± 5.3 |" in record
    assert "| 01_ok-seed7 | ok |" in record and "unchanged" in record  # a seed's run ran its notebook's code

    # run at one seed again (the profile's own), the seed runs' pages and rows go
    monkeypatch.setattr(report, "notebook_seeds", lambda stem, profile: ())
    with contextlib.redirect_stdout(io.StringIO()):
        assert report.build_report("paper", nb_dir, tmp_path / "reports", only="01", jobs=1) == 0
    assert [p.name for p in sorted(out.glob("01_ok*"))] == ["01_ok.html", "01_ok.ipynb"]
    merged = json.loads((out / "results.json").read_text())
    assert [r["accuracy"] for r in merged["rows"]] == [70.0] and merged["seed_rows"] == {}


def test_clear_outputs_removes_a_notebooks_seed_runs_and_nothing_else(tmp_path):
    for name in ("01_a", "01_a-seed7", "01_a-seed13", "01_ab", "02_b-seed7"):
        for path in (f"{name}.ipynb", f"{name}.html", f"runs/{name}.json", f"results/{name}.json",
                     f"results/{name}.outcomes.npz"):
            (tmp_path / path).parent.mkdir(exist_ok=True)
            (tmp_path / path).write_text("{}")
    report.clear_outputs(tmp_path, "01_a")
    assert sorted(p.name for p in tmp_path.rglob("*.json") if p.parent.name == "runs") == ["01_ab.json",
                                                                                        "02_b-seed7.json"]
    assert sorted(p.name for p in tmp_path.glob("*.html")) == ["01_ab.html", "02_b-seed7.html"]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "01_ab.json", "01_ab.outcomes.npz", "02_b-seed7.json", "02_b-seed7.outcomes.npz"]  # no stale outcomes


def test_clear_outputs_of_chosen_seeds_keeps_the_other_seeds_and_drops_the_unseeded_run(tmp_path):
    for name in ("01_a", "01_a-seed7", "01_a-seed13", "01_a-seed21"):
        for path in (f"{name}.html", f"runs/{name}.json", f"results/{name}.outcomes.npz"):
            (tmp_path / path).parent.mkdir(exist_ok=True)
            (tmp_path / path).write_text("{}")
    report.clear_outputs(tmp_path, "01_a", seeds=[7, 21])
    assert sorted(p.name for p in tmp_path.glob("*.html")) == ["01_a-seed13.html"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["01_a-seed13.json"]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["01_a-seed13.outcomes.npz"]


def test_seeds_choose_the_seed_runs_and_leave_the_unseeded_notebooks():
    paths = [ROOT / "notebooks" / f"{stem}.ipynb" for stem in ("04_dbpedia_bert", "05_vit_sparsifiner")]
    runs = report.notebook_runs(paths, "paper", seeds=[21, 7])
    assert [r.stem for r in runs] == ["04_dbpedia_bert-seed7", "04_dbpedia_bert-seed21", "05_vit_sparsifiner"]
    with pytest.raises(ValueError, match="at seeds 7, 13, 21; give some of those"):
        report.notebook_runs(paths, "paper", seeds=[8])
    with pytest.raises(ValueError, match=r"\(none: they run once"):
        report.notebook_runs(paths[1:], "paper", seeds=[7])


def test_the_seeds_option_reads_whole_numbers_and_refuses_the_rest():
    from bab.commands.report import seed_list

    assert seed_list(None) is None and seed_list("7, 13") == [7, 13]
    for bad in ("", "7,x", "-1"):
        with pytest.raises(ValueError, match="--seeds takes comma-separated whole numbers"):
            seed_list(bad)


def test_the_committed_notebooks_declare_the_seed_the_report_sets():
    for stem in seeds.SEEDED_NOTEBOOKS:
        nb = nbformat.read(str(ROOT / "notebooks" / f"{stem}.ipynb"), as_version=4)
        [parameters] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert any(line.startswith("seed = None") for line in parameters.source.splitlines()), stem


def test_record_without_seed_runs_has_no_seeds_section(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "results.json").write_text(json.dumps({"profile": "quick", "rows": []}))
    assert "## Seeds" not in Path(write_record(tmp_path)).read_text()
