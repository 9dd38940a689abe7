"""Training with EViT-style token pruning on: EViT fine-tuned ("dense") and Sparsif-EViT ("joint"), the options'
checks, and the run-cache dict of a config that does not prune (unchanged by the new fields)."""

import math
import random

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from bab.core.runs import config_difference
from bab.experiments.vit import VIT
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.train import ViTTrainConfig, _step, _teacher_rows, train_vit
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward

TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)  # 17 tokens


def tiny(**extra):
    torch.manual_seed(0)
    return build_vit(ViTClassifierConfig(**TINY, **extra)).eval()


def is_predictor(name: str) -> bool:
    """Whether a parameter name is a connectivity predictor's (each layer's attention holds one)."""
    return ".attention.connectivity_predictor." in name


def toy_data(n=48):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def sparsifiner_from(teacher):
    model = tiny(connectivity=ConnectivityConfig(n_down=4))
    model.load_state_dict(teacher.state_dict(), strict=False)
    return model


def layer_lengths(model):
    """Record the sequence length each layer receives on every training forward: {layer: set of lengths}."""
    seen = {i: set() for i in range(len(model.vit.layers))}
    for i, layer in enumerate(model.vit.layers):
        layer.layernorm_before.register_forward_hook(lambda module, args, out, i=i: seen[i].add(args[0].shape[1]))
    return seen


# ----------------------------------------------------------------------------- the run cache's dict

def test_a_config_is_keyed_by_what_it_changes_from_the_defaults():
    assert config_difference(ViTTrainConfig()) == {}
    assert config_difference(ViTTrainConfig(objective="joint")) == {"objective": "joint"}
    assert config_difference(VIT["quick"].phase2) == {"objective": "joint", "epochs": 8, "lr": 3e-4,
                                                      "keep_rates": [0.1, 0.25, 0.5, 1.0]}
    assert config_difference(ViTTrainConfig(objective="joint", joint_predictor=True)) == {
        "objective": "joint", "joint_predictor": True}
    # a pruning config names both options, so it never meets a run trained without them
    pruned = config_difference(ViTTrainConfig(token_keep=0.7, prune_layers=[1, 2]))
    assert pruned == {"token_keep": 0.7, "prune_layers": [1, 2]}
    assert config_difference(ViTTrainConfig(token_keep=0.5, prune_layers=(1, 2))) != pruned


# ----------------------------------------------------------------------------- the options' checks


@pytest.mark.parametrize("options, error, message", [
    (dict(token_keep=0.7), ValueError, "needs both token_keep and prune_layers"),
    (dict(prune_layers=(1,)), ValueError, "needs both token_keep and prune_layers"),
    (dict(token_keep=0.0, prune_layers=(1,)), ValueError, "token_keep"),
    (dict(token_keep=1.5, prune_layers=(1,)), ValueError, "token_keep"),
    (dict(token_keep=0.5, prune_layers=(-1,)), ValueError, "distinct layer indices >= 0"),
    (dict(token_keep=0.5, prune_layers=(1, 1)), ValueError, "distinct layer indices >= 0"),
    (dict(token_keep=0.5, prune_layers=1), TypeError, "tuple of layer indices"),
    (dict(token_keep=0.5, prune_layers=(1.0,)), TypeError, "tuple of layer indices"),
    (dict(objective="predictor", token_keep=0.5, prune_layers=(1,)), ValueError, "'dense' .EViT. or 'joint'"),
    (dict(objective="linformer", token_keep=0.5, prune_layers=(1,)), ValueError, "'dense' .EViT. or 'joint'"),
], ids=["keep alone", "layers alone", "keep 0", "keep 1.5", "negative layer", "repeated layer", "not a tuple",
        "not ints", "phase 1", "linformer"])
def test_bad_token_pruning_options_raise_errors_that_say_how_to_fix_them(options, error, message):
    with pytest.raises(error, match=message):
        ViTTrainConfig(**options)


def test_prune_layers_outside_the_model_raise_before_training():
    config = ViTTrainConfig(epochs=1, batch_size=16, token_keep=0.5, prune_layers=(0, 2))
    with pytest.raises(ValueError, match=r"prune_layers \[2\] lie outside the model's layers 0..1"):
        train_vit(tiny(), toy_data(), config, progress=False)


# ----------------------------------------------------------------------------- EViT fine-tuned


def test_evit_training_prunes_in_its_forward_and_learns():
    model = tiny().train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = layer_lengths(model)
    config = ViTTrainConfig(objective="dense", epochs=4, batch_size=16, lr=1e-2, token_keep=0.5, prune_layers=(0,))
    result = train_vit(model, toy_data(), config, progress=False)
    # layer 0 sees every token, layer 1 only CLS and ceil(0.5 * 16) patches, on every training batch
    assert seen == {0: {17}, 1: {1 + math.ceil(0.5 * 16)}}
    losses = [row["loss"] for row in result.history]
    assert losses[-1] < losses[0]
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_evit_training_loss_is_the_cross_entropy_of_the_pruned_forward():
    model = tiny()
    x, labels = toy_data(8).tensors
    config = ViTTrainConfig(objective="dense", token_keep=0.5, prune_layers=(0,))
    with torch.no_grad():
        out, loss = _step(model, None, x, labels, config, random.Random(0))
        pruned = vit_forward(model, x, token_keep=0.5, prune_layers=(0,))
        full = vit_forward(model, x)
    assert out.tokens.shape[1] == 9 and torch.equal(loss, F.cross_entropy(pruned.logits, labels))
    assert not torch.equal(pruned.logits, full.logits)  # the pruning reaches the logits


# ----------------------------------------------------------------------------- Sparsif-EViT


@pytest.mark.parametrize("joint_predictor", [False, True], ids=["frozen predictor", "joint predictor"])
def test_sparsif_evit_training_prunes_in_its_forward_and_trains_the_backbone(joint_predictor):
    teacher = tiny()
    model = sparsifiner_from(teacher).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = layer_lengths(model)
    config = ViTTrainConfig(objective="joint", epochs=4, batch_size=16, lr=1e-2, keep_rates=(0.25, 0.5),
                            token_keep=0.5, prune_layers=(0,), joint_predictor=joint_predictor,
                            lambda_attn_joint=1.0 if joint_predictor else 0.0)
    result = train_vit(model, toy_data(), config, teacher=teacher, progress=False)
    assert seen == {0: {17}, 1: {9}}
    losses = [row["loss"] for row in result.history]
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    for name, p in model.named_parameters():
        assert (not torch.equal(p, before[name])) == (joint_predictor or not is_predictor(name)), name


def test_sparsif_evit_distils_the_kept_tokens_from_the_teachers_tokens_at_their_positions():
    """Pruned after the last layer only, a student equal to its teacher (keep rate 1: every connection) returns the
    teacher's own tokens at the kept positions, so the token and KL terms vanish and the loss is the CE alone: the
    tokens are matched position by position."""
    teacher = tiny()
    model = sparsifiner_from(teacher)
    x, labels = toy_data(8).tensors
    config = ViTTrainConfig(objective="joint", keep_rates=(1.0,), token_keep=0.5, prune_layers=(1,))
    with torch.no_grad():
        out, loss = _step(model, teacher, x, labels, config, random.Random(0))
        reference = vit_forward(teacher, x)
    assert out.tokens.shape[1] == 9
    torch.testing.assert_close(loss, F.cross_entropy(reference.logits, labels), atol=1e-5, rtol=0)
    # the same student with the tokens matched by index instead (the first 9) would not vanish
    assert F.mse_loss(out.tokens, reference.tokens[:, :9]) > 1e-3


def test_sparsif_evit_keeps_the_patches_the_teachers_cls_attends_to_most():
    """Pruned after layer 0 of a student equal to its teacher at keep rate 1, the positions the token loss reads
    (the forward's ``positions``) are CLS and the top half of the teacher's layer-0 CLS attention (averaged over
    heads), written out here; and the token loss is taken against the teacher's tokens at exactly those positions."""
    teacher = tiny()
    model = sparsifiner_from(teacher)
    x, labels = toy_data(8).tensors
    config = ViTTrainConfig(objective="joint", keep_rates=(1.0,), token_keep=0.5, prune_layers=(0,), lambda_kl=0.0)
    with torch.no_grad():
        out = vit_forward(model, x, attention="masked", keep_rate=1.0, **config.token_pruning())
        target = vit_forward(teacher, x, return_internals=True)
        cls = target.layers[0]["probs"][:, :, 0, 1:].mean(1)
        _, loss = _step(model, teacher, x, labels, config, random.Random(0))
    expected = torch.cat([torch.zeros(8, 1, dtype=torch.long), cls.topk(8).indices.sort(-1).values + 1], dim=1)
    assert torch.equal(out.positions, expected)
    assert not torch.equal(expected, torch.arange(9).expand(8, 9))  # not merely the first tokens
    kept = torch.stack([target.tokens[b, expected[b]] for b in range(8)])  # [8, 9, D], gathered one by one
    written_out = F.cross_entropy(out.logits, labels) + config.lambda_token * ((out.tokens - kept) ** 2).mean()
    torch.testing.assert_close(loss, written_out, atol=1e-6, rtol=1e-5)


def test_the_teachers_attention_rows_and_columns_at_the_kept_positions_by_hand():
    probs = torch.rand(2, 3, 6, 6)
    positions = torch.tensor([[0, 2, 5], [0, 1, 4]])
    rows = _teacher_rows(probs, {"positions": positions, "first_query": 1})
    assert rows.shape == (2, 3, 2, 3)
    for b in range(2):
        for h in range(3):
            for r in range(2):
                for c in range(3):
                    assert rows[b, h, r, c] == probs[b, h, positions[b, 1 + r], positions[b, c]]
    assert torch.equal(_teacher_rows(probs, {"positions": None, "first_query": 1}), probs[:, :, 1:])
