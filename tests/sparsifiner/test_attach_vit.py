"""Sparsifiner attached to transformers' ViT and DeiT (bab.sparsifiner.attach, bab.sparsifiner.attach_tokens), on
random-initialised tiny models: equal to the plain model with every key kept, equal to the ViT forward written out
layer by layer (tests/sparsifiner/vit_loop.py) at lower keep rates, with token pruning and in phase 1, the three cores
equal, exactly k keys per query, a save / reload round trip, EViT token pruning, Linformer through the same
implementation, and clear errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import (
    BertConfig,
    BertModel,
    DeiTConfig,
    DeiTForImageClassification,
    ViTConfig,
    ViTForImageClassification,
)

from bab.sparsifiner import fused
from bab.sparsifiner.attach import (
    attach,
    configure,
    is_attached,
    load_attached,
    predictors,
    sparsifiner_state,
)
from bab.sparsifiner.attach_tokens import prune_and_fuse, set_token_pruning
from bab.sparsifiner.predictor import ConnectivityConfig, num_connections
from tests.sparsifiner.vit_loop import (
    dense_attention,
    linformer_attention,
    predictor_masked_attention,
    trained_looking,
    vit_loop,
)

TINY = dict(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, num_labels=10)
ARCHITECTURES = {"vit": (ViTConfig, ViTForImageClassification), "deit": (DeiTConfig, DeiTForImageClassification)}
PAPER = ConnectivityConfig(n_down=4)  # the paper's text (bab's defaults) at a rank that fits 17 tokens
OFFICIAL = ConnectivityConfig.official(n_down=4, top_m=2)  # CLS dense, top-m, shared basis, projections
SPECIAL = {"vit": 1, "deit": 2}  # CLS (+ distillation token) ahead of the 16 patches
ATOL = 1e-5


@pytest.fixture
def needs_fused():
    """Skips where the fused kernel cannot be built; asked when a test runs, so collection never compiles it."""
    if not fused.fused_available():
        pytest.skip("the fused C++ kernel cannot be built here")


def plain_model(arch: str, seed: int = 0):
    """A random tiny model in eval mode. DeiT starts its CLS, distillation token and position embeddings at zero,
    which makes every token of an image alike to the CLS query; they get random values so rankings differ."""
    torch.manual_seed(seed)
    config_class, model_class = ARCHITECTURES[arch]
    model = model_class(config_class(**TINY)).eval()
    with torch.no_grad():
        embeddings = model.base_model.embeddings
        tokens = (embeddings.cls_token, embeddings.position_embeddings, getattr(embeddings, "distillation_token", None))
        for p in tokens:
            if p is not None:
                p.normal_()
    return model


def attached(arch: str, predictor=PAPER, **settings):
    """(the plain model, an attached deep copy of it)."""
    base = plain_model(arch)
    return base, attach(copy.deepcopy(base), predictor, **settings)


@pytest.fixture(scope="module")
def pixels():
    return torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(1))


def logits(model, pixels):
    with torch.no_grad():
        return model(pixel_values=pixels).logits


# ---------------------------------------------------------------- (a) every key kept: the plain model


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("predictor", [PAPER, OFFICIAL], ids=["paper", "official"])
def test_keep_one_equals_the_plain_model(arch, predictor, pixels):
    base, model = attached(arch, predictor, core="masked", keep=1.0)
    reference = logits(base, pixels)
    cores = ["dense", "masked", "sparse"] + (["fused"] if fused.fused_available() else [])
    for core in cores:
        configure(model, core=core)
        torch.testing.assert_close(logits(model, pixels), reference, atol=ATOL, rtol=0, msg=core)
    assert model.config._attn_implementation == "bab_sparsifiner" and is_attached(model)


# ---------------------------------------------------------------- (b) a ViT forward written out (vit_loop.py)


@pytest.mark.parametrize("predictor", [PAPER, OFFICIAL], ids=["paper", "official"])
def test_equals_the_written_out_vit_at_lower_keep_rates(predictor, pixels):
    """Logits, each layer's connections, the final tokens and the multiply-adds against the forward written out
    layer by layer, attention as a softmax over the mask of the predictor called on the loop's own q and k."""
    base, model = (trained_looking(m) for m in attached("vit", predictor))
    with torch.no_grad():
        dense = logits(base, pixels)
        for core, keep in (("masked", 0.25), ("sparse", 0.4)):
            configure(model, core=core, keep=keep)
            ours = logits(model, pixels)
            expected = vit_loop(model, pixels, predictor_masked_attention(keep))
            torch.testing.assert_close(ours, expected["logits"], atol=ATOL, rtol=0)
            assert (ours - dense).abs().max() > 100 * ATOL  # the sparsity changes the answer
            state = sparsifiner_state(model)
            for mine, reference in zip(state.layers, expected["layers"], strict=True):
                assert mine["index"].shape[-1] == num_connections(keep, 17)
                if core == "sparse":  # its sums run in the index's order: the predictor's own
                    assert torch.equal(mine["index"], reference["index"])
                else:  # the masked core may select with the fused kernel: the same keys, in its order
                    assert torch.equal(mine["index"].sort(-1).values, reference["index"].sort(-1).values)
            torch.testing.assert_close(state.tokens, expected["tokens"], atol=ATOL, rtol=0)
            assert state.mhsa_macs() == pytest.approx(sum(layer["macs"] for layer in expected["layers"]))


def test_token_pruning_without_fusion_equals_the_written_out_vit(pixels):
    """EViT without the fused token after layer 0: CLS and the 8 patches the CLS query attends to most (mean over
    heads, in sequence order) go on; layer 1's predictor reads their original positions."""
    base, model = (trained_looking(m) for m in attached("vit", core="masked", keep=0.3))
    set_token_pruning(model, 0.5, (0,), fuse=False)
    with torch.no_grad():
        ours = logits(model, pixels)
        assert (ours - logits(base, pixels)).abs().max() > 100 * ATOL  # pruning and sparsity change the answer
        expected = vit_loop(model, pixels, predictor_masked_attention(0.3), token_keep=0.5, prune_layers=(0,))
    torch.testing.assert_close(ours, expected["logits"], atol=ATOL, rtol=0)
    state = sparsifiner_state(model)
    reference = expected["layers"][1]
    assert reference["positions"].shape == (3, 9) and state.layers[1]["n"] == 9
    assert torch.equal(state.layers[1]["positions"], reference["positions"])
    assert torch.equal(state.positions, expected["positions"]) and not state.fused.any()
    # the masked core may select with the fused kernel: the same keys, in its order
    assert torch.equal(state.layers[1]["index"].sort(-1).values, reference["index"].sort(-1).values)
    torch.testing.assert_close(state.tokens, expected["tokens"], atol=ATOL, rtol=0)
    assert state.mhsa_macs() == pytest.approx(sum(layer["macs"] for layer in expected["layers"]))
    # the kept patches are not simply the first ones: the ranking reaches the positions
    assert not torch.equal(reference["positions"], torch.arange(9).expand(3, 9))


def test_distillation_quantities_match_the_written_out_vit(pixels):
    """Phase 1 (dense pass, predictor scores): each layer's approximate attention is the predictor's phase-1 scores
    on the layer's q and k, the loss the mean over layers of the squared error against the dense attention rows of
    the predicted queries, and the loss reaches the predictors."""
    base, model = attached("vit", OFFICIAL, core="dense")
    state = configure(model, with_predictor=True)
    model(pixel_values=pixels)
    scores = []

    def attend(i, attention, q, k, v, positions):  # dense attention, and the predictor on the loop's q and k
        scores.append(attention.connectivity_predictor(q, k, 1.0, with_scores=True)["phase1_scores"])
        return dense_attention(i, attention, q, k, v, positions)

    with torch.no_grad():
        expected = vit_loop(model, pixels, attend)
    for mine, reference in zip(state.approximate_attention(), scores, strict=True):
        assert mine.shape == (3, 4, 16, 17)  # the CLS query is dense with the official settings
        torch.testing.assert_close(mine, reference, atol=ATOL, rtol=0)
    for mine, reference in zip(state.attention_probs(), expected["layers"], strict=True):
        torch.testing.assert_close(mine, reference["probs"], atol=ATOL, rtol=0)
    rows = [layer["probs"][:, :, 1:] for layer in expected["layers"]]
    written_out = sum(((s - r) ** 2).mean() for s, r in zip(scores, rows, strict=True)) / len(rows)
    loss = state.phase1_loss()
    torch.testing.assert_close(loss.detach(), written_out, atol=1e-6, rtol=1e-5)
    assert loss > 0
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in predictors(model)[0].parameters())
    assert [m.shape for m in state.masks()] == [(3, 4, 17, 17)] * 2


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_masked_core_equals_an_attention_loop_over_the_mask(arch, pixels):
    """Each layer's attention output against softmax over each query's kept keys, written out query by query."""
    _, model = attached(arch, core="masked", keep=0.3)
    seen = {}
    for i, layer in enumerate(model.base_model.layers):
        layer.attention.register_forward_pre_hook(lambda m, args, kw, i=i: seen.__setitem__(("in", i), args[0]),
                                                  with_kwargs=True)
        layer.attention.register_forward_hook(lambda m, args, out, i=i: seen.__setitem__(("out", i), out[0]))
    with torch.no_grad():
        model(pixel_values=pixels)
        masks = sparsifiner_state(model).masks()
        for i, layer in enumerate(model.base_model.layers):
            attention, x = layer.attention, seen[("in", i)]
            B, n, _ = x.shape
            q, k, v = (p(x).view(B, n, 4, 8).transpose(1, 2) for p in (attention.q_proj, attention.k_proj,
                                                                         attention.v_proj))
            heads = torch.zeros(B, 4, n, 8)
            for b in range(B):
                for h in range(4):
                    for query in range(n):
                        keys = masks[i][b, h, query].nonzero().squeeze(-1)
                        weights = torch.softmax(k[b, h, keys] @ q[b, h, query] / math.sqrt(8), dim=0)
                        heads[b, h, query] = weights @ v[b, h, keys]
            expected = attention.o_proj(heads.transpose(1, 2).reshape(B, n, 32))
            torch.testing.assert_close(seen[("out", i)], expected, atol=ATOL, rtol=0)


def test_phase_two_step_trains_through_the_sparse_mask_and_pruned_tokens(pixels):
    """A training forward (masked core at keep 0.25, tokens pruned and fused) gives the backbone a gradient; the
    state's tokens, positions and fused flags let the token loss compare the kept tokens with a dense teacher's."""
    base, model = attached("vit", keep=0.25)
    teacher = copy.deepcopy(model)  # a copy has its own state: configuring it leaves the student alone
    configure(teacher, core="dense")
    set_token_pruning(model, 0.5, (0,))
    assert sparsifiner_state(teacher).core == "dense" and sparsifiner_state(teacher).token_keep is None
    model.train()
    with torch.no_grad():
        teacher(pixel_values=pixels)
    teacher_tokens = sparsifiner_state(teacher).tokens  # [B, 17, D]
    out = model(pixel_values=pixels)
    state = sparsifiner_state(model)
    real = ~state.fused  # the fused token has no teacher counterpart
    kept = torch.gather(teacher_tokens, 1, state.positions.unsqueeze(-1).expand(-1, -1, 32))
    loss = torch.nn.functional.cross_entropy(out.logits, torch.arange(3)) + (state.tokens - kept)[real].pow(2).mean()
    loss.backward()
    assert model.vit.layers[1].attention.q_proj.weight.grad.abs().sum() > 0
    assert teacher_tokens.shape == (3, 17, 32) and state.tokens.shape == (3, 10, 32)


# ---------------------------------------------------------------- (c) the cores agree


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("predictor", [PAPER, OFFICIAL], ids=["paper", "official"])
def test_masked_sparse_and_fused_cores_agree(arch, predictor, pixels):
    _, model = attached(arch, predictor, keep=0.25)
    runs = [("masked", "auto"), ("sparse", "csr"), ("sparse", "gather")]
    runs += [("fused", "auto")] if fused.fused_available() else []
    results = {}
    for core, kernel in runs:
        state = configure(model, core=core, sparse_kernel=kernel)
        # the same set of keys per query; the fused kernel lists them in an order of its own
        results[core, kernel] = (logits(model, pixels), [layer["index"].sort(-1).values for layer in state.layers])
    reference, reference_index = results["masked", "auto"]
    for run, (out, index) in results.items():
        torch.testing.assert_close(out, reference, atol=ATOL, rtol=0, msg=str(run))
        assert all(torch.equal(a, b) for a, b in zip(index, reference_index, strict=True)), run


# ---------------------------------------------------------------- (d) exactly k keys per query


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("predictor", [PAPER, OFFICIAL], ids=["paper", "official"])
def test_mask_keeps_exactly_k_keys_per_query(arch, predictor, pixels):
    _, model = attached(arch, predictor)
    n = 16 + SPECIAL[arch]
    for keep in (0.1, 0.25, 0.3, 1.0):
        configure(model, keep=keep)
        logits(model, pixels)
        k = num_connections(keep, n)
        assert k == max(1, math.ceil(keep * n))  # none of these products is a whole number
        for mask in sparsifiner_state(model).masks():
            counts = mask.sum(-1)  # [B, H, n]
            first = 1 if predictor.cls_dense else 0
            assert (counts[:, :, first:] == k).all() and (counts[:, :, :first] == n).all()


def test_mask_counts_follow_the_pruned_sequence(pixels):
    _, model = attached("vit", keep=0.25)
    set_token_pruning(model, 0.5, (0,))
    logits(model, pixels)
    n = 1 + 8 + 1  # CLS, ceil(0.5 * 16) patches, the fused token
    mask = sparsifiner_state(model).masks()[1]
    assert mask.shape == (3, 4, n, n) and (mask.sum(-1) == num_connections(0.25, n)).all()


# ---------------------------------------------------------------- (e) save and reload


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_save_pretrained_round_trip(arch, pixels, tmp_path):
    base, model = attached(arch, OFFICIAL, core="masked", keep=0.25)
    with torch.no_grad():
        for p in predictors(model)[1].parameters():  # not the initial draw: the weights must come from the file
            p.add_(0.01)
    expected = logits(model, pixels)
    model.save_pretrained(tmp_path)
    model_class = ARCHITECTURES[arch][1]
    reloaded = load_attached(model_class, str(tmp_path), core="masked", keep=0.25).eval()
    assert reloaded.state_dict().keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    assert torch.equal(logits(reloaded, pixels), expected)
    # the checkpoint still loads as the plain transformers model (the predictor weights are skipped)
    plain = model_class.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(logits(plain, pixels), logits(base, pixels), atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_save_pretrained_round_trip_keeps_the_linformer_projections(arch, pixels, tmp_path):
    base, model = attached(arch, PAPER, core="linformer", linformer_len=5)
    with torch.no_grad():
        for p in model.base_model.layers[1].attention.linformer_projection.parameters():  # not the initial draw
            p.add_(0.01)
    expected = logits(model, pixels)
    model.save_pretrained(tmp_path)
    model_class = ARCHITECTURES[arch][1]
    reloaded = load_attached(model_class, str(tmp_path), core="linformer").eval()
    assert sparsifiner_state(reloaded).linformer_len == 5 and sparsifiner_state(reloaded).core == "linformer"
    assert reloaded.state_dict().keys() == model.state_dict().keys()
    assert sum(".linformer_projection." in name for name in model.state_dict()) == 2 * 2  # e, f in 2 layers
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    assert torch.equal(logits(reloaded, pixels), expected)
    plain = model_class.from_pretrained(tmp_path).eval()  # the projections are skipped by the plain class
    torch.testing.assert_close(logits(plain, pixels), logits(base, pixels), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- (f) token pruning


def test_prune_and_fuse_by_hand():
    x = torch.arange(6, dtype=torch.float32).view(1, 6, 1).expand(1, 6, 2)  # CLS, then tokens 1..5
    cls = torch.tensor([0.0, 0.1, 0.4, 0.05, 0.3, 0.15]).view(1, 1, 6).expand(1, 2, 6)  # two heads alike
    out, positions, is_fused = prune_and_fuse(x, cls, 0.5, num_special=1, fuse=True)
    # ceil(0.5 * 5) = 3 kept: tokens 2, 4, 5 in sequence order; 1 and 3 fused with weights 0.1 and 0.05
    assert positions.tolist() == [[0, 2, 4, 5, 1]] and is_fused.tolist() == [[False] * 4 + [True]]
    torch.testing.assert_close(out[0, :, 0], torch.tensor([0.0, 2.0, 4.0, 5.0, 0.1 * 1 + 0.05 * 3]))
    out, positions, _ = prune_and_fuse(x, cls, 0.5, num_special=2, fuse=False)
    assert positions.tolist() == [[0, 1, 2, 4]]  # two special tokens kept; ceil(0.5 * 4) = 2 of tokens 2..5
    out, positions, is_fused = prune_and_fuse(x, cls, 1.0)
    assert torch.equal(out, x) and positions.tolist() == [list(range(6))] and not is_fused.any()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_token_pruning_keeps_the_stated_number_of_tokens(arch, pixels):
    _, model = attached(arch, core="masked", keep=0.5)
    special = SPECIAL[arch]
    for layers, fuse, expected in (((0,), True, special + 8 + 1), ((0,), False, special + 8),
                                   ((0, 1), True, special + math.ceil(0.5 * 9) + 1)):
        set_token_pruning(model, 0.5, layers, fuse=fuse)
        logits(model, pixels)
        state = sparsifiner_state(model)
        assert state.tokens.shape == (3, expected, 32)
        assert state.positions.shape == state.fused.shape == (3, expected)
        # one fused token per example and pruning layer, unless a later pruning dropped (and re-fused) it
        assert int(state.fused[:, -1].sum()) == (3 if fuse else 0) and int(state.fused.sum()) <= 3 * len(layers)
        assert (state.positions[:, :special] == torch.arange(special)).all()  # special tokens stay first
        assert state.layers[1]["n"] == special + 8 + int(fuse)
    set_token_pruning(model, None)
    logits(model, pixels)
    assert sparsifiner_state(model).tokens.shape[1] == 16 + special


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_token_pruning_at_keep_one_equals_the_plain_model(arch, pixels):
    base, model = attached(arch, core="masked", keep=1.0)
    set_token_pruning(model, 1.0, (0, 1))
    torch.testing.assert_close(logits(model, pixels), logits(base, pixels), atol=ATOL, rtol=0)
    # EViT alone: no predictors, the dense core
    _, evit = attached(arch, None, core="dense")
    set_token_pruning(evit, 1.0, (0,))
    torch.testing.assert_close(logits(evit, pixels), logits(base, pixels), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- (g) clear errors


@pytest.mark.parametrize("keep", [0, -0.1, 1.5, float("nan")])
def test_keep_outside_the_unit_interval_raises(keep):
    with pytest.raises(ValueError, match="keep_rate must lie in"):
        attached("vit", keep=keep)
    _, model = attached("vit")
    with pytest.raises(ValueError, match="keep_rate must lie in"):
        configure(model, keep=keep)
    assert sparsifiner_state(model).keep_rate == 1.0  # unchanged


def test_bad_settings_raise_clear_errors(pixels):
    with pytest.raises(ValueError, match="core must be one of"):
        attached("vit", core="bogus")
    with pytest.raises(ValueError, match="needs Linformer projections"):
        attached("vit", core="linformer")  # attached without linformer_len
    with pytest.raises(ValueError, match="need connectivity predictors"):
        attached("vit", None, core="masked")
    with pytest.raises(TypeError, match="predictor_config must be"):
        attached("vit", 8)
    with pytest.raises(ValueError, match="supports transformers' ViT and DeiT"):
        attach(BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                    intermediate_size=64)), PAPER)
    _, model = attached("vit")
    with pytest.raises(ValueError, match="already attached"):
        attach(model, PAPER)
    with pytest.raises(ValueError, match="fused kernel is for inference"):
        configure(model, core="fused", with_predictor=True)
    set_token_pruning(model, 0.5, (0,))
    with pytest.raises(ValueError, match="CLS attention row"):
        configure(model, core="fused")
    for layers in ((2,), (0, 0)):
        with pytest.raises(ValueError, match="prune_layers must be distinct"):
            set_token_pruning(model, 0.5, layers)
    with pytest.raises(ValueError, match="token_keep must lie in"):
        set_token_pruning(model, 0.0, (0,))
    with pytest.raises(ValueError, match="not an attached model|no 'bab_sparsifiner'"):
        plain = plain_model("vit")
        load_attached(ViTForImageClassification, _saved(plain))


def _saved(model) -> str:
    import tempfile

    path = tempfile.mkdtemp()
    model.save_pretrained(path)
    return path


def test_attention_dropout_and_masks_are_refused(pixels):
    config_class, model_class = ARCHITECTURES["vit"]
    model = attach(model_class(config_class(**TINY, attention_probs_dropout_prob=0.1)), PAPER).train()
    with pytest.raises(ValueError, match="no attention dropout"):
        model(pixel_values=pixels)


def test_larger_images_than_the_predictors_cover_raise(pixels):
    _, model = attached("vit", keep=0.5)
    with pytest.raises(ValueError, match="predictors were built for at most 17"):
        model(pixel_values=torch.randn(1, 1, 35, 35), interpolate_pos_encoding=True)


def test_gradient_checkpointing_is_refused(pixels):
    _, model = attached("vit", keep=0.5)
    model.activation_checkpointing_enable()
    model.train()
    with pytest.raises(RuntimeError, match="gradient checkpointing"):
        model(pixel_values=pixels).logits.sum().backward()


@pytest.mark.usefixtures("needs_fused")
def test_fused_core_refuses_gradients(pixels):
    _, model = attached("vit", core="fused", keep=0.25)
    with pytest.raises(RuntimeError, match="without autograd"):
        model(pixel_values=pixels)


# ---------------------------------------------------------------- (h) Linformer, run by the same implementation


@pytest.mark.parametrize("predictor", [None, PAPER], ids=["linformer alone", "with predictors"])
def test_linformer_core_equals_the_low_rank_attention_written_out(predictor, pixels):
    """attach(..., linformer_len=5) and core "linformer": every layer softmax(Q (E K)^T / sqrt(d)) (F V) with its own
    E, F [5, 17], written out one example and head at a time; the multiply-adds 4 n proj_len D per layer."""
    base = trained_looking(plain_model("vit"))
    model = attach(copy.deepcopy(base), predictor, core="linformer", linformer_len=5)
    projections = [layer.attention.linformer_projection for layer in model.vit.layers]
    assert all(p.e.shape == p.f.shape == (5, 17) for p in projections)
    assert not torch.equal(projections[0].e, projections[1].e) and not torch.equal(projections[0].e, projections[0].f)
    with torch.no_grad():
        ours = logits(model, pixels)
        expected = vit_loop(model, pixels, linformer_attention)
    torch.testing.assert_close(ours, expected["logits"], atol=ATOL, rtol=0)
    state = sparsifiner_state(model)
    torch.testing.assert_close(state.tokens, expected["tokens"], atol=ATOL, rtol=0)
    assert state.mhsa_macs() == sum(layer["macs"] for layer in expected["layers"]) == 2 * 4 * 17 * 5 * 32
    assert (ours - logits(base, pixels)).abs().max() > 100 * ATOL  # low rank: not the dense model
    configure(model, core="dense")  # the projections change nothing on the dense core
    torch.testing.assert_close(logits(model, pixels), logits(base, pixels), atol=ATOL, rtol=0)


def test_linformer_settings_raise_clear_errors():
    with pytest.raises(ValueError, match="linformer_len must be an int in 1..17"):
        attached("vit", None, core="dense", linformer_len=18)
    _, model = attached("vit", None, core="linformer", linformer_len=4)
    with pytest.raises(ValueError, match="CLS attention row"):
        set_token_pruning(model, 0.5, (0,))
