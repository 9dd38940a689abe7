"""The masked core's fused top-k selection (``selection="auto"``) against the predictor's torch ranking
(``"torch"``): the same keys, so one training step's loss and every gradient are equal bit for bit, at 50 and 197
tokens, with and without token pruning; the torch path is what runs where the kernel cannot be built. And its
fused masked softmax (SDPA with the mask, when no probabilities are recorded) against a loop over the connections
and against the explicit probabilities."""

import math
import random
import shutil

import pytest
import torch

from bab.sparsifiner import attention, fused
from bab.sparsifiner.train import ViTTrainConfig, _step
from bab.sparsifiner.training_bench import (
    largest_difference,
    masked_attention_bench,
    phase2_models,
    phase2_step,
    same_step,
    teacher_memo_bench,
    training_step_bench,
)
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


def test_the_fused_masked_softmax_equals_a_loop_over_each_querys_connections(monkeypatch):
    torch.manual_seed(0)
    B, H, n, d = 2, 3, 7, 4
    q, k, v = (torch.randn(B, H, n, d) for _ in range(3))
    index = torch.stack([torch.randperm(n)[:3] for _ in range(B * H * (n - 1))]).view(B, H, n - 1, 3)
    predicted = {"index": index, "coefficients": None, "first_query": 1}  # CLS (query 0) attends to every key

    class Predictor:
        def __call__(self, *args, **kwargs):
            return predicted

    layer = attention.CoreInputs(predictor=Predictor(), linformer=None, keep_rate=0.5, positions=None,
                                 need_probs=False, with_predictor=False, sparse_kernel="auto", selection="torch")
    monkeypatch.setattr(attention, "_sparsifiner_macs", lambda *args: 0.0)  # the stand-in has no up-projection
    out, info = attention.masked_core(q, k, v, layer)
    assert "probs" not in info  # the fused path never forms them
    expected = torch.zeros_like(out)
    for b in range(B):
        for h in range(H):
            for i in range(n):
                keys = list(range(n)) if i == 0 else index[b, h, i - 1].tolist()
                weights = [math.exp(float(q[b, h, i] @ k[b, h, j]) / math.sqrt(d)) for j in keys]
                for w, j in zip(weights, keys, strict=True):
                    expected[b, h, i] += w / sum(weights) * v[b, h, j]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens,keep_rate", [(50, 0.25), (197, 0.1)])
def test_a_phase2_step_with_the_fused_softmax_equals_the_explicit_one_to_rounding(tokens, keep_rate):
    student, teacher = phase2_models(tokens)
    pixels, labels = batch(8)
    explicit = phase2_step(student, teacher, pixels, labels, keep_rate, "torch", record_probs=True)
    fused_softmax = phase2_step(student, teacher, pixels, labels, keep_rate, "torch", record_probs=False)
    assert len(explicit) > 10 and explicit.keys() == fused_softmax.keys()
    assert largest_difference(explicit, fused_softmax) < 1e-4
    # not the same computation: a difference of exactly zero everywhere would mean both ran one path
    assert not same_step(explicit, fused_softmax)


def test_largest_difference_is_relative_to_each_tensor():
    a = {"loss": torch.tensor(2.0), "w": torch.tensor([1e-3, -2e-3])}
    b = {"loss": torch.tensor(2.0), "w": torch.tensor([1e-3, -1e-3])}
    assert largest_difference(a, b) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="different gradients"):
        largest_difference(a, {"loss": torch.tensor(2.0)})


def test_a_gradient_at_rounding_level_is_measured_against_the_floor():
    """A key bias's gradient is zero in exact arithmetic (softmax ignores a shift of a whole row): what both
    steps hold there is rounding, whose relative difference to itself would be meaningless."""
    a = {"loss": torch.tensor(1.0), "k_bias": torch.tensor([4e-11])}
    b = {"loss": torch.tensor(1.0), "k_bias": torch.tensor([9e-11])}
    assert largest_difference(a, b) == pytest.approx(5e-11 / 1e-6)


def test_the_attention_bench_reports_the_difference():
    table = masked_attention_bench(tokens=(50,), keep_rates=(0.5,), batch_size=8, warmup=0, repeats=2)
    assert list(table.columns[-1:]) == ["largest relative difference"]
    assert (table["largest relative difference"] < 1e-4).all()
    assert (table["explicit softmax ms"] > 0).all() and (table["fused softmax ms"] > 0).all()


def test_the_memo_bench_reports_equal_steps(kernel):
    table = teacher_memo_bench(tokens=(50,), keep_rates=(0.5,), batch_size=8, warmup=0, repeats=2)
    assert table["same loss and gradients"].all()
    assert (table["teacher run ms"] > 0).all() and (table["teacher memo ms"] > 0).all()
