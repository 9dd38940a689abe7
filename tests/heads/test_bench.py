"""The benchmark command runs and reports consistent figures (no timing thresholds here)."""

import math

import pytest

from bab.__main__ import main
from bab.core.timing import count_flops
from bab.heads.bench import bench_custom, format_custom


def test_bench_custom_reports_kept_heads_and_flop_limit():
    result = bench_custom(0.5, batch_size=2, seq_len=16, d_model=32, num_heads=4, num_layers=2, d_ff=64,
                          warmup=1, repeats=3)
    assert result["heads_kept"] == math.ceil(0.5 * 8)
    assert result["heads_total"] == 8
    assert result["dense_ms"] > 0 and result["skip_ms"] > 0
    assert result["measured_speedup"] == pytest.approx(result["dense_ms"] / result["skip_ms"])
    # skipping half the heads removes attention FLOPs, but never the embeddings, MLPs or classifier
    assert 1.0 < result["analytic_speedup"] < 2.0
    text = format_custom(result)
    assert "measured speed-up" in text and "analytic limit" in text


def test_full_budget_has_no_analytic_gain():
    result = bench_custom(1.0, batch_size=2, seq_len=8, d_model=16, num_heads=2, num_layers=1, d_ff=32,
                          warmup=0, repeats=1)
    assert result["analytic_speedup"] == pytest.approx(1.0)


def test_count_flops_counts_a_matmul():
    import torch

    a, b = torch.ones(4, 5), torch.ones(5, 6)
    assert count_flops(lambda: a @ b) == 2 * 4 * 5 * 6


def test_cli_prints_figures_and_rejects_bad_budgets(capsys):
    assert main(["bench", "heads", "--budget", "0.5", "--batch-size", "1", "--seq-len", "8", "--d-model", "16",
                 "--num-heads", "2", "--num-layers", "1", "--d-ff", "16", "--warmup", "0", "--repeats", "1"]) == 0
    assert "measured speed-up" in capsys.readouterr().out
    assert main(["bench", "heads", "--budget", "1.5"]) == 2
    assert "budget must lie in (0, 1]" in capsys.readouterr().err


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


def test_structural_bench_times_saved_and_reloaded_models_with_an_eager_flop_limit(capsys):
    assert main(["bench", "bert", "--budget", "0.5", "--examples", "2", "--batch-size", "2", "--seq-len", "16",
                 "--warmup", "0", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "36/72 heads kept" in out and "structural @0.50" in out and "analytic_limit" in out
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
