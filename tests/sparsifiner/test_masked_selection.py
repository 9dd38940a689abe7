"""The masked core's fused top-k selection (``selection="auto"``) against the predictor's torch ranking
(``"torch"``): the same keys, so one training step's loss and every gradient are equal bit for bit, at 50 and 197
tokens, with and without token pruning; the torch path is what runs where the kernel cannot be built."""

import random
import shutil

import pytest
import torch

from bab.sparsifiner import attention, fused
from bab.sparsifiner.train import ViTTrainConfig, _step
from bab.sparsifiner.training_bench import phase2_models, phase2_step, same_step, training_step_bench
from bab.sparsifiner.vit import ViTForward, vit_forward

HAS_COMPILER = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


@pytest.fixture(scope="module")
def kernel():
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler: the fused kernel cannot be built here, and the masked core uses torch's")
    assert fused.load_extension() is not None, f"the fused kernel failed to build: {fused._state['error']!r}"


def batch(n_images, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n_images, 1, 28, 28, generator=generator), torch.randint(0, 10, (n_images,), generator=generator)


@pytest.mark.parametrize("tokens,keep_rate", [(50, 0.1), (50, 0.25), (50, 0.5), (197, 0.1)])
def test_a_phase2_step_is_the_same_bit_for_bit_with_either_selection(kernel, tokens, keep_rate, monkeypatch):
    calls = []
    kernel_selection = fused.fused_selection
    monkeypatch.setattr(fused, "fused_selection", lambda *a, **kw: calls.append(1) or kernel_selection(*a, **kw))
    student, teacher = phase2_models(tokens)
    pixels, labels = batch(8 if tokens == 197 else 32)
    by_torch = phase2_step(student, teacher, pixels, labels, keep_rate, "torch")
    assert not calls
    by_kernel = phase2_step(student, teacher, pixels, labels, keep_rate, "auto")
    assert len(calls) == 4  # the kernel selected in each of the 4 layers
    assert same_step(by_torch, by_kernel)
    assert len(by_torch) > 10  # the loss and the gradients of the backbone and the predictors


def test_with_token_pruning_too(kernel):
    """Sparsif-EViT's step: after pruning, each example selects among its own surviving tokens (``positions``)."""
    student, teacher = phase2_models(50)
    pixels, labels = batch(16)
    config = ViTTrainConfig(objective="joint", keep_rates=(0.25,), token_keep=0.5, prune_layers=(1, 2))
    results = []
    for selection in ("torch", "auto"):
        student.zero_grad(set_to_none=True)
        out, loss = _step(student, teacher, pixels, labels, config, random.Random(0), selection=selection)
        loss.backward()
        assert out.positions is not None
        results.append({"loss": loss.detach(), **{n: p.grad.clone() for n, p in student.named_parameters()
                                                  if p.grad is not None}})
    assert same_step(*results)


def test_the_selections_differ_only_in_order(kernel):
    """The index sets agree; the orders need not (which is why only the masked core takes the kernel's)."""
    student, _ = phase2_models(50)
    pixels, _ = batch(4)
    with torch.no_grad():
        indices = {}
        for selection in ("torch", "auto"):
            out = vit_forward(student, pixels, attention="masked", keep_rate=0.25, selection=selection,
                              return_internals=True)
            indices[selection] = [layer["index"] for layer in out.layers]
    for a, b in zip(indices["torch"], indices["auto"], strict=True):
        assert torch.equal(a.sort(-1).values, b.sort(-1).values)


def test_without_a_kernel_the_masked_core_ranks_with_torch(monkeypatch):
    monkeypatch.setattr(fused, "load_extension", lambda: None)
    layer = attention.CoreInputs(predictor=None, linformer=None, keep_rate=0.25, positions=None, need_probs=False,
                                 with_predictor=False, sparse_kernel="auto")
    assert attention._masked_selection(torch.zeros(1, 1, 2, 2), layer) is None


def test_selection_is_chosen_by_name_and_checked():
    with pytest.raises(ValueError, match="selection must be one of"):
        ViTForward(attention="masked", keep_rate=0.5, selection="fast")


def test_the_bench_reports_equal_steps(kernel):
    table = training_step_bench(tokens=(50,), keep_rates=(0.5,), batch_size=8, warmup=0, repeats=2)
    assert table["same loss and gradients"].all()
    assert (table["torch selection ms"] > 0).all() and (table["fused selection ms"] > 0).all()
