"""The benchmark command runs and reports consistent figures (no timing thresholds here)."""

import math

import pytest
import torch

from bab.__main__ import main
from bab.core.timing import count_flops
from bab.heads.bench import bench_custom, format_grid

TINY = dict(seq_len=16, d_model=32, num_heads=4, num_layers=2, d_ff=64, warmup=0, repeats=1)
TINY_FLAGS = ["--seq-len", "8", "--d-model", "16", "--num-heads", "2", "--num-layers", "1", "--d-ff", "16",
              "--warmup", "0", "--repeats", "1"]
GRID_COLUMNS = ["batch", "budget", "heads kept", "dense ms", "hard ms", "speed-up", "analytic limit", "realised",
                "goal", "met"]


def test_bench_custom_times_a_batch_size_by_budget_grid_with_flop_limits():
    grid = bench_custom([0.75, 0.25, 0.5], batch_sizes=[4, 1], examples=4, **TINY)
    assert list(grid.columns) == GRID_COLUMNS
    assert list(zip(grid["batch"], grid["budget"], strict=True)) == [(b, x) for b in (1, 4) for x in (0.25, 0.5, 0.75)]
    assert list(grid["heads kept"]) == [f"{math.ceil(x * 8)}/8" for x in (0.25, 0.5, 0.75)] * 2
    assert (grid["dense ms"] > 0).all() and (grid["hard ms"] > 0).all()
    # dense is timed once per batch size, so each batch size's rows share its dense time
    assert grid.groupby("batch")["dense ms"].nunique().eq(1).all()
    assert grid["speed-up"].tolist() == pytest.approx((grid["dense ms"] / grid["hard ms"]).tolist())
    # skipping heads removes attention FLOPs, never the embeddings, MLPs or classifier; fewer heads, more saving
    assert ((grid["analytic limit"] > 1.0) & (grid["analytic limit"] < 1 / grid["budget"])).all()
    for _, rows in grid.groupby("batch"):
        assert rows["analytic limit"].is_monotonic_decreasing
    assert list(grid["goal"]) == ["speed-up >= 0.9 x limit"] * 3 + ["speed-up >= limit"] * 3
    assert set(grid["met"]) <= {"yes", "NO"}
    assert "a pass = 4 x batch 1, 1 x batch 4" in grid.attrs["shape"]
    text = format_grid(grid)
    assert "analytic limit" in text and "realised" in text and "hard ms" in text


def test_full_budget_has_no_analytic_gain_and_no_goal():
    grid = bench_custom(1.0, batch_sizes=2, examples=2, **TINY)
    assert len(grid) == 1
    assert grid.loc[0, "analytic limit"] == pytest.approx(1.0)
    assert grid.loc[0, "goal"] == "-" and grid.loc[0, "met"] == "-"


def test_dense_is_timed_once_per_batch_size_interleaved_with_every_budget(monkeypatch):
    import bab.heads.bench as bench

    calls = []
    real = bench.time_side_by_side

    def recording(fns, **kwargs):
        calls.append(list(fns))
        return real(fns, **kwargs)

    monkeypatch.setattr(bench, "time_side_by_side", recording)
    bench_custom([0.25, 0.5], batch_sizes=[1, 2], examples=2, **TINY)
    assert calls == [["dense", "@0.25", "@0.50"]] * 2


def test_goals_are_judged_per_batch_size():
    from bab.heads.bench import bert_goal, heads_goal

    assert heads_goal(1).test(1.8, 2.0, 0.9) and not heads_goal(1).test(1.7, 2.0, 0.9)  # 0.9 x 2.0 = 1.8
    assert heads_goal(64).test(2.0, 2.0, 1.0) and not heads_goal(64).test(1.99, 2.0, 0.99)
    assert bert_goal(1) == heads_goal(1)
    assert bert_goal(16).test(1.5, 2.0, 0.95) and not bert_goal(16).test(1.9, 2.0, 0.94)


def test_batches_of_gives_every_batch_size_the_same_examples():
    from bab.heads.bench import batches_of

    ids = torch.arange(64 * 3).view(64, 3)
    assert [len(b) for b in batches_of(ids, 1, 64)] == [1] * 64
    assert [len(b) for b in batches_of(ids, 16, 40)] == [16, 16]  # rounded down to whole batches
    assert [len(b) for b in batches_of(ids, 64, 8)] == [64]  # at least one batch
    assert torch.equal(torch.cat(batches_of(ids, 16, 64)), ids)
    with pytest.raises(ValueError, match="lower the batch size"):
        batches_of(ids, 128, 64)
    with pytest.raises(ValueError, match="--examples"):
        batches_of(ids, 1, 0)


def test_parse_batch_sizes_and_budgets_say_how_to_fix_bad_lists():
    from bab.core.budget import parse_budgets
    from bab.heads.bench import parse_batch_sizes

    assert parse_batch_sizes("64,1,64") == [1, 64]
    assert parse_batch_sizes(" 16 ") == [16]
    assert parse_budgets("0.75,0.25,0.5") == [0.25, 0.5, 0.75]
    for bad, message in [("1,x", "comma-separated whole numbers"), ("", "comma-separated whole numbers"),
                         ("1.5", "comma-separated whole numbers"), ("0", "whole number >= 1"),
                         ("4,-2", "whole number >= 1")]:
        with pytest.raises(ValueError, match=message):
            parse_batch_sizes(bad)
    for bad, message in [("0.5,abc", "comma-separated numbers"), (",", "at least one budget"),
                         ("0", r"budget must lie in \(0, 1\]"), ("1.01", r"budget must lie in \(0, 1\]")]:
        with pytest.raises(ValueError, match=message):
            parse_budgets(bad)


def test_count_flops_counts_a_matmul():
    a, b = torch.ones(4, 5), torch.ones(5, 6)
    assert count_flops(lambda: a @ b) == 2 * 4 * 5 * 6


def test_count_flops_sees_the_cpu_sdpa_kernel_as_its_two_matrix_products():
    import torch.nn.functional as F

    q, k, v = torch.randn(3, 2, 16, 8), torch.randn(3, 2, 20, 8), torch.randn(3, 2, 20, 4)
    by_hand = 2 * 3 * 2 * (16 * 20 * 8 + 16 * 20 * 4)  # Q K^T, then P V
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v)) == by_hand
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(1, 2, 16, 20))) == by_hand
    assert count_flops(lambda: torch.softmax(q @ k.transpose(-1, -2), -1) @ v) == by_hand


def test_cli_prints_one_grid_table_and_keeps_the_singular_aliases(capsys):
    assert main(["bench", "heads", "--budgets", "0.25,0.5", "--batch-sizes", "1,2", "--examples", "2",
                 *TINY_FLAGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["batch", "budget"])
    assert lines[header].split()[-1] == "met" and "analytic limit" in lines[header]
    rows = [line.split()[:2] for line in lines[header + 1: header + 5]]
    assert rows == [["1", "0.25"], ["1", "0.50"], ["2", "0.25"], ["2", "0.50"]]
    assert main(["bench", "heads", "--budget", "0.5", "--batch-size", "1", "--examples", "1", *TINY_FLAGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["batch", "budget"])
    assert lines[header + 1].split()[:3] == ["1", "0.50", "1/2"] and lines[header + 2].startswith("ms:")


@pytest.mark.parametrize("flags, message", [
    (["--budget", "1.5"], "budget must lie in (0, 1]"),
    (["--budgets", "0.25,half"], "--budgets must be comma-separated numbers in (0, 1]"),
    (["--batch-sizes", "1,0"], "batch size must be a whole number >= 1"),
    (["--batch-sizes", "one"], "--batch-sizes must be comma-separated whole numbers >= 1, e.g. 1,64"),
])
def test_cli_rejects_bad_grids_with_advice(capsys, flags, message):
    assert main(["bench", "heads", *flags]) == 2
    assert message in capsys.readouterr().err


def test_cli_defaults_are_the_deployment_grid():
    from bab.__main__ import build_parser

    heads = build_parser().parse_args(["bench", "heads"])
    bert = build_parser().parse_args(["bench", "bert"])
    assert (heads.budgets, heads.batch_sizes, heads.examples, heads.seq_len) == ("0.25,0.5,0.75", "1,64", 64, 128)
    assert (bert.budgets, bert.batch_sizes, bert.examples, bert.seq_len) == ("0.25,0.5,0.75", "1,16", 64, 128)


def test_latency_table_times_an_emptied_layer_and_reports_the_realised_share():
    import torch

    from bab.heads.bench import latency_table
    from bab.heads.encoder import EncoderClassifier, EncoderConfig

    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=30, num_classes=2, max_len=12, d_model=16, num_heads=2,
                                            num_layers=2, d_ff=32, gates="budget")).eval()
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # a global top-k may leave a layer with no head
    batches = [torch.randint(1, 30, (4, 12)) for _ in range(2)]
    table = latency_table({"dense": (model, {"mode": "dense"}), "skip": (model, {"mode": "skip", "head_mask": mask})},
                          batches, warmup=0, repeats=2)
    assert list(table.index) == ["dense", "skip"]
    assert table.loc["dense", "speedup"] == 1.0
    assert table.loc["skip", "analytic_limit"] > 1.0
    expected = (1 - table.loc["skip", "ms"] / table.loc["dense", "ms"]) / (1 - 1 / table.loc["skip", "analytic_limit"])
    assert table.loc["skip", "realised"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="baseline"):
        latency_table({"skip": (model, {"mode": "dense"})}, batches)


@pytest.mark.parametrize("repeats", [2, 3])
def test_latency_table_keeps_the_paired_repeats_behind_each_speedup(repeats):
    import numpy as np
    import torch

    from bab.heads.bench import latency_table, repeat_times

    small, big = torch.nn.Linear(8, 8), torch.nn.Linear(8, 256)
    batches = [torch.ones(16, 8)]
    table = latency_table({"dense": (big, {}), "small": (small, {})}, batches, warmup=0, repeats=repeats)
    series = repeat_times(table, "small")
    assert len(series["dense_ms"]) == len(series["ms"]) == repeats
    assert series["dense_ms"] == repeat_times(table, "dense")["ms"]  # the baseline's own series
    assert np.median(series["ms"]) == pytest.approx(table.loc["small", "ms"], rel=1e-12)
    assert np.median(series["dense_ms"]) / np.median(series["ms"]) == pytest.approx(table.loc["small", "speedup"],
                                                                                      rel=1e-12)
    assert table.round(3).attrs == table.attrs  # a displayed copy keeps them


def test_structural_bench_times_saved_and_reloaded_models_with_an_eager_flop_limit(capsys):
    assert main(["bench", "bert", "--budgets", "0.25,0.5", "--examples", "2", "--batch-sizes", "1,2",
                 "--seq-len", "16", "--warmup", "0", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "dense vs structurally pruned (SDPA; limit from eager-attention twins)" in out
    assert "a pass = 2 x batch 1, 1 x batch 2" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["batch", "budget"])
    assert "pruned ms" in lines[header] and "analytic limit" in lines[header]
    rows = [line.split() for line in lines[header + 1: header + 5]]
    assert [row[:3] for row in rows] == [["1", "0.25", "18/72"], ["1", "0.50", "36/72"],
                                         ["2", "0.25", "18/72"], ["2", "0.50", "36/72"]]
    assert all(float(row[6]) > 1.0 for row in rows)  # every analytic limit (eager FLOP ratio) is a gain
    assert "realised >= 0.95" in lines[header + 3]  # batches above 1 are judged on the realised saving
    assert main(["bench", "bert", "--budget", "0"]) == 2
    assert "budget must lie in (0, 1]" in capsys.readouterr().err


def test_flop_configs_replace_what_is_counted_not_what_is_timed():
    import torch

    from bab.heads.bench import latency_table

    small, big = torch.nn.Linear(8, 8), torch.nn.Linear(8, 64)
    batches = [torch.ones(2, 8)]
    table = latency_table({"dense": (small, {}), "other": (small, {})}, batches, warmup=0, repeats=1,
                          flop_configs={"dense": (big, {}), "other": (small, {})})
    assert table.loc["other", "analytic_limit"] == pytest.approx(8.0)


def test_latency_table_times_to_its_ceiling_when_the_target_is_out_of_reach():
    import torch

    from bab.core.timing import Repeats
    from bab.heads.bench import latency_table

    small, big = torch.nn.Linear(8, 8), torch.nn.Linear(8, 256)
    table = latency_table({"dense": (big, {}), "small": (small, {})}, [torch.ones(16, 8)], warmup=0,
                          repeats=Repeats(2, target=1e-9, maximum=4))
    assert table.attrs["repeats"] == 4 and len(table.attrs["times_ms"]["small"]) == 4


def test_cli_times_until_a_target_and_says_how_many_repeats_it_took(capsys):
    assert TINY_FLAGS[-2:] == ["--repeats", "1"]
    assert main(["bench", "heads", "--budget", "0.5", "--batch-size", "1", "--examples", "1", *TINY_FLAGS[:-2],
                 "--repeats", "2", "--interval-target", "0.000001", "--max-repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "interleaved, median of 3 repeats (2 to 3, until each speed-up was within +-0.0001%) after" in out


@pytest.mark.parametrize("flags, message", [
    (["--max-repeats", "9"], "--max-repeats bounds an --interval-target"),
    (["--interval-target", "2"], "in (0, 1), e.g. 0.02"),
    (["--repeats", "1", "--interval-target", "0.05"], "at least 2 repeats"),
    (["--repeats", "5", "--interval-target", "0.05", "--max-repeats", "3"], "maximum >= minimum = 5"),
])
def test_cli_rejects_a_target_it_cannot_time_with_advice(capsys, flags, message):
    assert main(["bench", "heads", *flags]) == 2
    assert message in capsys.readouterr().err




def test_training_bench_compares_the_steps_bit_for_bit_and_the_cli_fails_when_they_differ(capsys, monkeypatch):
    """On notebook 01's synthetic case, whose data is generated (02's AG News case needs BAB_DATA_DIR)."""
    from bab.commands import bench as bench_command
    from bab.heads import encoder, training_bench

    case = bench_command.quick_training_case("synthetic")
    table = training_bench.training_step_bench({"synthetic": case}, warmup=0, repeats=2)
    assert table["same loss and gradients"].all() and table["batch"].tolist() == [(64, 64)]
    assert (table["SDPA ms"] > 0).all() and (table["math_backend_attention ms"] > 0).all()
    with pytest.raises(ValueError, match="synthetic"):
        bench_command.quick_training_case("gpt2")

    def rounding_differently(q, k, v, mask=None, dropout_p=0.0):
        return encoder.math_backend_attention(q * (1 + 1e-3), k, v, mask, dropout_p)

    monkeypatch.setitem(training_bench.ATTENTIONS, "math_backend_attention", rounding_differently)
    monkeypatch.setattr(bench_command, "TRAINING_CASES", ("synthetic",))
    assert main(["bench", "heads", "--training", "--warmup", "0", "--repeats", "2"]) == 1
    out = capsys.readouterr().out
    assert "same loss and gradients" in out and "False" in out
