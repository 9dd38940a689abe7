"""The whole-model bench (bab.sparsifiner.model_bench) and ``python -m bab bench sparse --model``, on transformers'
ViT with Sparsifiner attached: its models, its FLOP counts against hand-written formulas and the multiply-adds the
cores report, its table's shape, and the fused kernel's logits against the masked reference. Speed itself is not
asserted. Notebook 05's trained model is ``bab.sparsifiner.vit.build_vit``'s; one test times one built that way."""

import copy
import re

import pytest
import torch
from transformers import ViTConfig, ViTForImageClassification

from bab.__main__ import main as bab_main
from bab.sparsifiner.attach import attach, configure, predictors, sparsifiner_state
from bab.sparsifiner.evaluate import fused_logit_check
from bab.sparsifiner.fused import fused_available
from bab.sparsifiner.model_bench import (
    attached_vit,
    bench_model,
    deit_s_shaped,
    describe,
    layer_queries_keys,
    patch_grid,
    random_pixels,
    set_realistic_model_state,
    whole_model_flops,
)
from bab.sparsifiner.predictor import ConnectivityConfig, num_connections
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward

# 8 x 8 one-channel images in 2 x 2 patches: n = 17 tokens, 2 layers x 2 heads of width 8
TINY = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=16, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=32, num_labels=10)  # never attached to: see plain()
TINY_PREDICTOR = dict(n_down=4, tau=0.2, up_prune=0.04)
COLUMNS = ["tokens", "batch", "keep_rate", "k", "dense ms", "fused ms", "dense images/s", "fused images/s", "speed-up",
           "analytic limit", "attention share", "dense GFLOPs/image", "fused GFLOPs/image", "repeats"]


def fused_or_sparse() -> str:
    """The core whose multiply-adds the analytic limit uses: fused where built, else the sparse core (the same
    count). Asked inside the tests, not at import: collecting them never waits for a compilation."""
    return "fused" if fused_available() else "sparse"


@pytest.fixture
def needs_fused():
    if not fused_available():
        pytest.skip("the fused C++ kernel cannot be built here")


def tiny(predictor_state="realistic", **extra):
    return attached_vit(TINY, predictor_state, **{**TINY_PREDICTOR, **extra})


def plain(seed: int = 0) -> ViTForImageClassification:
    """transformers' ViT in TINY's shape on a config of its own (attaching switches its config's attention)."""
    torch.manual_seed(seed)
    return ViTForImageClassification(copy.deepcopy(TINY)).eval()


def reported_macs(model, pixels, core, keep=1.0):
    """The attention cores' multiply-adds per image that a forward with ``core`` reports on the attached model."""
    configure(model, core=core, keep=keep)
    with torch.no_grad():
        model(pixel_values=pixels)
    return sparsifiner_state(model).mhsa_macs()


def dense_flops_by_hand(c: ViTConfig) -> float:
    """FlopCounterMode's count of the dense forward per image, written out: 2 FLOPs per multiply-add of the patch
    convolution, each layer's q/k/v/o projections, MLP, QK^T and PV, and the classifier on CLS; layer norms, biases
    and the softmax are free."""
    n, D, mlp, p = (c.image_size // c.patch_size) ** 2 + 1, c.hidden_size, c.intermediate_size, c.patch_size
    layer = 4 * 2 * n * D * D + 2 * 2 * n * D * mlp + 2 * 2 * n * n * D
    return 2 * (n - 1) * D * c.num_channels * p * p + c.num_hidden_layers * layer + 2 * D * c.num_labels


@pytest.mark.parametrize("n, image_size", [(197, 224), (577, 384), (1025, 512)])
def test_deit_s_shaped_is_transformers_vit_in_deit_s_widths_with_the_patch_grid_of_n_tokens(n, image_size):
    model = deit_s_shaped(n, predictor_state="init")
    c = model.config
    assert isinstance(model, ViTForImageClassification) and c._attn_implementation == "bab_sparsifiner"
    assert (c.hidden_size, c.num_attention_heads, c.num_hidden_layers, c.intermediate_size, c.patch_size) == (
        384, 6, 12, 1536, 16)
    assert c.image_size == image_size and c.num_channels == 3 and c.num_labels == 1000
    state = sparsifiner_state(model)
    assert state.max_tokens == n and state.core == "dense" and not model.training
    assert all((p.n_down, p.tau, p.up_prune) == (32, 0.05, 0.01) for p in predictors(model))
    assert len(predictors(model)) == 12
    plain = [p for name, p in model.named_parameters() if "connectivity_predictor" not in name]
    assert sum(p.numel() for p in plain) == pytest.approx(22e6, rel=0.05)  # DeiT-S: 22M parameters
    assert f"(n = {n})" in describe(model) and "12 layers x 6 heads, width 384, MLP 1536" in describe(model)


@pytest.mark.parametrize("bad", [196, 198, 1, 0, 2.5])
def test_a_token_count_off_the_patch_grid_says_which_counts_work(bad):
    with pytest.raises(ValueError, match=r"g \* g \+ 1.*197 \(14 x 14\)"):
        patch_grid(bad)
    with pytest.raises(ValueError, match="predictor_state must be one of"):
        deit_s_shaped(197, predictor_state="trained")


def test_the_attached_models_dense_core_gives_the_plain_transformers_models_logits():
    """What the bench times as "dense" is transformers' own ViT: the same seed builds the same weights (the
    predictors are drawn after them), and the dense core with predictors in the realistic state changes nothing."""
    model, x = tiny(), random_pixels(TINY, 3)
    assert not hasattr(TINY, "bab_sparsifiner")  # attached_vit attached to a copy of the config it was given
    reference = plain()
    with torch.no_grad():
        expected = reference(pixel_values=x).logits
        torch.testing.assert_close(model(pixel_values=x).logits, expected)
        # and an attached deep copy of the plain model, the way a user attaches a checkpoint
        torch.testing.assert_close(attach(copy.deepcopy(reference), TINY_PREDICTOR, core="dense")(
            pixel_values=x).logits, expected)


def test_each_layers_queries_and_keys_are_what_its_projections_give():
    """The hooks' q, k of layer 0 against an explicit computation: embeddings, layer norm, the q/k projections."""
    model, x = tiny("init"), random_pixels(TINY, 3)
    captured = layer_queries_keys(model, x)
    assert len(captured) == 2
    layer = model.vit.layers[0]
    with torch.no_grad():
        h = layer.layernorm_before(model.vit.embeddings(x))  # [B, n, D]
        for got, proj in zip(captured[0], (layer.attention.q_proj, layer.attention.k_proj), strict=True):
            expected = torch.stack([proj(h)[:, :, 8 * head:8 * (head + 1)] for head in range(2)], dim=1)
            torch.testing.assert_close(got, expected)  # [B, H, n, d], d = 16 / 2 heads
    assert captured[1][0].shape == (3, 2, 17, 8)
    assert sparsifiner_state(model).core == "dense"  # the capture's dense forward left the settings alone


def test_the_realistic_state_gives_every_layer_a_trained_predictors_sparsity():
    """Counted on the attached model: the basis each predictor prunes, and the coefficients at or below tau in a
    dense forward with the predictor's scores. tau = 0.2 > 1 / n_down, as the paper's 0.05 > 1 / 32 and notebook
    05's 0.2 > 1 / 8: a tiny W_down makes A_down uniform, every coefficient below tau, which the search starts from."""
    model, x = tiny("init", n_down=8), random_pixels(TINY, 4)
    reached = set_realistic_model_state(model, x)
    assert len(reached) == 2 and all(r["coefficients"] == pytest.approx(0.87, abs=0.05) for r in reached)
    basis = torch.cat([p.sparse_basis(17).flatten() for p in predictors(model)])
    assert float((basis == 0).float().mean()) == pytest.approx(0.9, abs=0.05)
    configure(model, core="dense", with_predictor=True)
    with torch.no_grad():
        model(pixel_values=x)
    coefficients = torch.cat([info["coefficients"].flatten() for info in sparsifiner_state(model).layers])
    assert float((coefficients == 0).float().mean()) == pytest.approx(0.87, abs=0.05)
    with pytest.raises(ValueError, match=r"attach\(model, ConnectivityConfig"):
        set_realistic_model_state(attach(plain(), None, core="dense"), x)


def test_whole_model_flops_by_hand():
    """The dense count against the formula written out, the attention share against 2 x the dense cores' reported
    multiply-adds (and the formula), and each fused count as the dense one with that share swapped for 2 x the
    multiply-adds the fused (or sparse) forward reports."""
    model, x = tiny(), random_pixels(TINY, 1)
    flops = whole_model_flops(model, x, [0.5, 0.25])
    dense = dense_flops_by_hand(TINY)
    assert flops["dense"] == dense
    assert flops["attention"] == 2 * reported_macs(model, x, "dense") == 2 * 2 * (2 * 17 * 17 * 16)
    for rate in (0.5, 0.25):
        macs = reported_macs(model, x, fused_or_sparse(), rate)
        assert flops[rate] == pytest.approx(dense - flops["attention"] + 2 * macs)
    assert flops[0.25] < flops[0.5] < dense


def test_bench_model_gives_one_row_per_batch_and_keep_rate_with_dense_and_fused_side_by_side():
    model = tiny()
    table = bench_model(model, keep_rates=(0.5, 0.25), batch_sizes=(1, 3), warmup=0, repeats=1)
    assert list(table.columns) == COLUMNS
    assert list(zip(table.batch, table.keep_rate, strict=True)) == [(1, 0.5), (1, 0.25), (3, 0.5), (3, 0.25)]
    assert (table.repeats == 1).all()
    assert (table.tokens == 17).all() and table.k.tolist() == [num_connections(r, 17) for r in (0.5, 0.25)] * 2
    dense_columns = ["dense ms", "dense images/s", "analytic limit", "attention share", "dense GFLOPs/image",
                     "fused GFLOPs/image"]
    assert (table[dense_columns] > 0).all().all() and table[dense_columns].notna().all().all()
    assert table.groupby("batch")["dense ms"].nunique().eq(1).all()  # dense timed once per batch size
    assert table["dense images/s"].tolist() == pytest.approx((1e3 * table.batch / table["dense ms"]).tolist())
    if fused_available():
        assert (table[["fused ms", "fused images/s", "speed-up"]] > 0).all().all()
        assert table["speed-up"].tolist() == pytest.approx((table["dense ms"] / table["fused ms"]).tolist())
        assert table["fused images/s"].tolist() == pytest.approx((1e3 * table.batch / table["fused ms"]).tolist())
    else:
        assert table["fused ms"].isna().all()
    # the analytic limit: FLOPs dense / fused, from the count by hand and the multiply-adds the cores report on the
    # image the bench counts (the first of its default pool)
    x = random_pixels(TINY, 3)[:1]
    dense, attention = dense_flops_by_hand(TINY), 2 * reported_macs(model, x, "dense")
    for rate, group in table.groupby("keep_rate"):
        fused = dense - attention + 2 * reported_macs(model, x, fused_or_sparse(), rate)
        assert group["analytic limit"].tolist() == pytest.approx([dense / fused] * 2)
        assert group["fused GFLOPs/image"].tolist() == pytest.approx([fused / 1e9] * 2)
    assert table["attention share"].tolist() == pytest.approx([attention / dense] * 4)
    assert table["dense GFLOPs/image"].tolist() == pytest.approx([dense / 1e9] * 4)

    # the bench sets the core for each of its forwards and leaves the model's own settings as they were
    state = configure(model, core="masked", keep=0.75)
    bench_model(model, keep_rates=(0.5,), batch_sizes=(1,), warmup=0, repeats=1)
    assert (state.core, state.keep_rate) == ("masked", 0.75)


@pytest.mark.usefixtures("needs_fused")
def test_the_fused_model_gives_the_masked_models_logits():
    """transformers' ViT, every layer through the fused kernel, against the reference (dense scores masked to the
    predictor's connections), both by fused_logit_check and by hand. Not vacuous: dense differs by far more."""
    model, x = tiny(), random_pixels(TINY, 3, seed=5)
    gaps = fused_logit_check(model, x, (0.5, 0.25))
    assert set(gaps) == {0.5, 0.25} and all(gap < 1e-5 for gap in gaps.values())
    with torch.no_grad():
        dense = model(pixel_values=x).logits
        for rate in (0.5, 0.25):
            configure(model, core="fused", keep=rate)
            fused = model(pixel_values=x).logits
            configure(model, core="masked")
            masked = model(pixel_values=x).logits
            torch.testing.assert_close(fused, masked, atol=1e-5, rtol=1e-5)
            assert (fused - dense).abs().max() > 1e-3


def test_bench_model_cycles_through_fewer_images_than_the_batch():
    model = tiny()
    pixels = random_pixels(TINY, 2, seed=3)
    table = bench_model(model, keep_rates=(0.5,), batch_sizes=(5,), pixels=pixels, warmup=0, repeats=1)
    assert table.batch.tolist() == [5]


def test_bench_model_times_notebook_05_s_model_built_by_build_vit():
    """``--model trained`` loads notebook 05's model, built by ``build_vit`` (its config, the dense core set): the same
    table from its forward, with the analytic limit from the multiply-adds ``vit_forward`` reports for each core and
    the FLOPs counted by hand; and the settings ``vit_forward`` left on the model do not reach the bench."""
    torch.manual_seed(0)
    config = ViTClassifierConfig(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2,
                                 intermediate_size=32, connectivity=ConnectivityConfig(**TINY_PREDICTOR))
    model = build_vit(config).eval()
    set_realistic_model_state(model, random_pixels(model.config, 2))
    x = random_pixels(model.config, 2)[:1]
    with torch.no_grad():
        macs = {core: vit_forward(model, x, attention=core, keep_rate=0.5).mhsa_macs
                for core in ("dense", fused_or_sparse())}
        vit_forward(model, x, attention="masked", keep_rate=0.25, token_keep=0.5, prune_layers=(0,))
    table = bench_model(model, keep_rates=(0.5,), batch_sizes=(2,), warmup=0, repeats=1)
    assert list(table.columns) == COLUMNS and table.tokens.tolist() == [17] and table.k.tolist() == [9]
    dense = dense_flops_by_hand(model.config)
    assert whole_model_flops(model, x, [0.5])["dense"] == pytest.approx(dense)
    assert macs["dense"] == 2 * 2 * 17 * 17 * 16
    assert table["analytic limit"].iloc[0] == pytest.approx(dense / (dense - 2 * macs["dense"] + 2 * macs[
        fused_or_sparse()]))
    assert table["analytic limit"].iloc[0] > 1.0
    if fused_available():
        assert max(fused_logit_check(model, x, (0.5,)).values()) < 1e-5


@pytest.mark.parametrize("call, error, message", [
    (lambda m: bench_model(m, batch_sizes=(0,)), ValueError, r"batch_sizes must be whole numbers >= 1, e\.g\. \(1, "),
    (lambda m: bench_model(m, pixels=torch.zeros(2, 3, 8, 8)), ValueError, r"\[N, 1, 8, 8\] for this model"),
    (lambda m: bench_model(m, keep_rates=(1.5,)), ValueError, "keep_rate must lie in"),
    (lambda m: bench_model(torch.nn.Linear(2, 2)), TypeError, "ViT or DeiT with Sparsifiner attached"),
    (lambda m: bench_model(plain()), TypeError, r"attach\(model, ConnectivityConfig"),
], ids=["batch", "pixels", "keep rate", "model", "not attached"])
def test_bench_model_rejects_bad_input_saying_how_to_fix_it(call, error, message):
    with pytest.raises(error, match=message):
        call(tiny("init"))


def test_bench_model_needs_predictors():
    with pytest.raises(ValueError, match=r"attach\(model, ConnectivityConfig\(\.\.\.\)\)"):
        bench_model(attach(plain(), None, core="dense"))


def test_the_cli_times_the_deit_s_shape_at_a_comma_separated_token_list(capsys):
    """n = 17 (a 4 x 4 grid of 16-pixel patches): DeiT-S's widths and depth on a short sequence, fast enough here."""
    argv = ["bench", "sparse", "--model", "deit-s", "--tokens", "5,17", "--batch-sizes", "1", "--keep-rates", "0.5",
            "--warmup", "0", "--repeats", "1", "--n-down", "4"]
    assert bab_main(argv) == 0
    out = capsys.readouterr().out
    assert "DeiT-S-shaped transformers ViTForImageClassification with Sparsifiner attached" in out
    assert "(n = 5)" in out and "(n = 17)" in out and "analytic limit" in out
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
