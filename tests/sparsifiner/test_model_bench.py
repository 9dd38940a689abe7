"""The whole-model bench (bab.sparsifiner.model_bench) and ``python -m bab bench sparse --model``: its models, its
FLOP counts against hand-written formulas, and its table's shape. Speed itself is not asserted."""

import re

import pytest
import torch

from bab.__main__ import main as bab_main
from bab.sparsifiner.evaluate import basis_sparsity, coefficient_sparsity
from bab.sparsifiner.fused import fused_available
from bab.sparsifiner.model_bench import (
    bench_model,
    deit_s_shaped,
    layer_queries_keys,
    patch_grid,
    random_pixels,
    set_realistic_model_state,
    whole_model_flops,
)
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.vit import ViTClassifier, ViTClassifierConfig

TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, n_down=4,
            tau=0.2, up_prune=0.04)


def tiny(**extra):
    torch.manual_seed(0)
    return ViTClassifier(ViTClassifierConfig(**{**TINY, "predictor": True, **extra})).eval()


@pytest.mark.parametrize("n, image_size", [(197, 224), (577, 384), (1025, 512)])
def test_deit_s_shaped_has_deit_s_widths_and_the_patch_grid_of_n_tokens(n, image_size):
    model = deit_s_shaped(n, predictor_state="init")
    c = model.config
    assert (c.hidden_size, c.num_heads, c.num_layers, c.intermediate_size, c.patch_size) == (384, 6, 12, 1536, 16)
    assert c.image_size == image_size and c.num_tokens == n and c.num_channels == 3
    assert (c.n_down, c.tau, c.up_prune) == (32, 0.05, 0.01) and len(model.predictors) == 12
    assert sum(p.numel() for p in model.hf.parameters()) == pytest.approx(22e6, rel=0.05)  # DeiT-S: 22M parameters


@pytest.mark.parametrize("bad", [196, 198, 1, 0, 2.5])
def test_a_token_count_off_the_patch_grid_says_which_counts_work(bad):
    with pytest.raises(ValueError, match=r"g \* g \+ 1.*197 \(14 x 14\)"):
        patch_grid(bad)
    with pytest.raises(ValueError, match="predictor_state must be one of"):
        deit_s_shaped(197, predictor_state="trained")


def test_each_layers_queries_and_keys_are_what_its_projections_give():
    """The hooks' q, k of layer 0 against an explicit computation: embeddings, layer norm, the q/k projections."""
    model, x = tiny(), random_pixels(tiny().config, 3)
    captured = layer_queries_keys(model, x)
    assert len(captured) == 2
    layer = model.layers[0]
    with torch.no_grad():
        h = layer.layernorm_before(model.hf.vit.embeddings(x))  # [B, n, D]
        for got, proj in zip(captured[0], (layer.attention.q_proj, layer.attention.k_proj), strict=True):
            expected = torch.stack([proj(h)[:, :, 8 * head:8 * (head + 1)] for head in range(2)], dim=1)
            torch.testing.assert_close(got, expected)  # [B, H, n, d], d = 16 / 2 heads
    assert captured[1][0].shape == (3, 2, 17, 8)


def test_the_realistic_state_gives_every_layer_a_trained_predictors_sparsity():
    """Checked by evaluate's own counts. tau = 0.2 > 1 / n_down, as the paper's 0.05 > 1 / 32 and notebook 05's
    0.2 > 1 / 8: a tiny W_down makes A_down uniform, every coefficient below tau, which the search starts from."""
    model, x = tiny(n_down=8), random_pixels(tiny().config, 4)
    reached = set_realistic_model_state(model, x)
    assert len(reached) == 2 and all(r["coefficients"] == pytest.approx(0.87, abs=0.05) for r in reached)
    assert basis_sparsity(model) == pytest.approx(0.9, abs=0.05)  # evaluate's own count of the pruned basis
    assert coefficient_sparsity(model, x) == pytest.approx(0.87, abs=0.05)
    with pytest.raises(ValueError, match=r"predictor=True"):
        set_realistic_model_state(ViTClassifier(ViTClassifierConfig(**{**TINY, "predictor": False})), x)


def test_whole_model_flops_by_hand():
    """The dense count against the formula written out (FlopCounterMode: 2 FLOPs per multiply-add, matmuls, the
    patch convolution and SDPA; layer norms and biases are free), and each fused count as the dense one with the
    attention cores' FLOPs swapped for 2 x the multiply-adds the fused (or sparse) forward reports."""
    model = tiny()
    c = model.config
    n, D, mlp, p = c.num_tokens, c.hidden_size, c.intermediate_size, c.patch_size
    layer = 4 * 2 * n * D * D + 2 * 2 * n * D * mlp + 2 * 2 * n * n * D  # q/k/v/o, MLP, QK^T and PV
    dense = 2 * (n - 1) * D * c.num_channels * p * p + c.num_layers * layer + 2 * D * c.num_classes
    x = random_pixels(c, 1)
    flops = whole_model_flops(model, x, [0.5, 0.25])
    assert flops["dense"] == dense
    assert flops["attention"] == c.num_layers * 2 * 2 * n * n * D
    with torch.no_grad():
        for rate in (0.5, 0.25):
            macs = model(x, attention="sparse", keep_rate=rate).mhsa_macs
            assert flops[rate] == pytest.approx(dense - flops["attention"] + 2 * macs)
    assert flops[0.25] < flops[0.5] < dense


def test_bench_model_gives_one_row_per_batch_and_keep_rate_with_dense_and_fused_side_by_side():
    model = tiny()
    table = bench_model(model, keep_rates=(0.5, 0.25), batch_sizes=(1, 3), warmup=0, repeats=1)
    assert list(table.columns) == ["tokens", "batch", "keep_rate", "k", "dense ms", "fused ms", "dense images/s",
                                   "fused images/s", "speed-up", "analytic limit", "attention share",
                                   "dense GFLOPs/image", "fused GFLOPs/image"]
    assert list(zip(table.batch, table.keep_rate, strict=True)) == [(1, 0.5), (1, 0.25), (3, 0.5), (3, 0.25)]
    assert (table.tokens == 17).all() and table.k.tolist() == [num_connections(r, 17) for r in (0.5, 0.25)] * 2
    dense_columns = ["dense ms", "dense images/s", "analytic limit", "attention share", "dense GFLOPs/image",
                     "fused GFLOPs/image"]
    assert (table[dense_columns] > 0).all().all() and table[dense_columns].notna().all().all()
    assert table.groupby("batch")["dense ms"].nunique().eq(1).all()  # dense timed once per batch size
    assert 0 < table["attention share"].iloc[0] < 1
    assert table["dense images/s"].tolist() == pytest.approx((1e3 * table.batch / table["dense ms"]).tolist())
    if fused_available():
        assert (table[["fused ms", "fused images/s", "speed-up"]] > 0).all().all()
        assert table["speed-up"].tolist() == pytest.approx((table["dense ms"] / table["fused ms"]).tolist())
    else:
        assert table["fused ms"].isna().all()


def test_bench_model_cycles_through_fewer_images_than_the_batch():
    model = tiny()
    pixels = random_pixels(model.config, 2, seed=3)
    table = bench_model(model, keep_rates=(0.5,), batch_sizes=(5,), pixels=pixels, warmup=0, repeats=1)
    assert table.batch.tolist() == [5]


@pytest.mark.parametrize("call, error, message", [
    (lambda m: bench_model(m, batch_sizes=(0,)), ValueError, r"batch_sizes must be whole numbers >= 1, e\.g\. \(1, "),
    (lambda m: bench_model(m, pixels=torch.zeros(2, 3, 8, 8)), ValueError, r"\[N, 1, 8, 8\] for this model"),
    (lambda m: bench_model(m, keep_rates=(1.5,)), ValueError, "keep_rate must lie in"),
    (lambda m: bench_model(torch.nn.Linear(2, 2)), TypeError, "must be a ViTClassifier"),
], ids=["batch", "pixels", "keep rate", "model"])
def test_bench_model_rejects_bad_input_saying_how_to_fix_it(call, error, message):
    with pytest.raises(error, match=message):
        call(tiny())


def test_bench_model_needs_predictors():
    with pytest.raises(ValueError, match=r"ViTClassifierConfig\(predictor=True\)"):
        bench_model(ViTClassifier(ViTClassifierConfig(**{**TINY, "predictor": False})))


def test_the_cli_times_the_deit_s_shape_at_a_comma_separated_token_list(capsys):
    """n = 17 (a 4 x 4 grid of 16-pixel patches): DeiT-S's widths and depth on a short sequence, fast enough here."""
    argv = ["bench", "sparse", "--model", "deit-s", "--tokens", "5,17", "--batch-sizes", "1", "--keep-rates", "0.5",
            "--warmup", "0", "--repeats", "1", "--n-down", "4"]
    assert bab_main(argv) == 0
    out = capsys.readouterr().out
    assert "DeiT-S-shaped" in out and "(n = 5)" in out and "(n = 17)" in out and "analytic limit" in out
    if fused_available():
        assert "max |fused - masked| logit on 2 images: keep 0.5:" in out


# slow (about 25 s): builds the smoke ViT study and its data through the command line, as a user runs it
@pytest.mark.slow
def test_the_cli_says_so_and_times_a_random_model_when_the_trained_one_is_not_cached(tmp_path, monkeypatch, capsys):
    """An empty run cache: the bench must not train (nothing is written into the cache) and must say it timed a
    random model of the trained one's shape."""
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path))
    argv = ["bench", "sparse", "--model", "trained", "--profile", "smoke", "--batch-sizes", "1", "--keep-rates",
            "0.25", "--warmup", "0", "--repeats", "1"]
    assert bab_main(argv) == 0
    out = capsys.readouterr().out
    assert "is not in the run cache" in out and "RANDOM model of the same shape" in out and "(n = 50)" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--batch-sizes", "1"], "--batch-sizes is for the whole-model bench"),
    (["--model", "trained", "--tokens", "197"], "leave --tokens out with --model trained"),
    (["--model", "deit-s", "--tokens", "198"], r"g \* g \+ 1"),
    (["--model", "deit-s", "--breakdown"], "leave it out with --model"),
    (["--model", "deit-s", "--batch-sizes", "0"], "batch size must be a whole number >= 1"),
], ids=["batch sizes without a model", "tokens with trained", "off the grid", "breakdown", "batch size 0"])
def test_the_cli_rejects_options_that_do_not_fit_the_model_bench(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path))
    assert bab_main(["bench", "sparse", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)
