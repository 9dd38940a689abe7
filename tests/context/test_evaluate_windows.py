"""evaluate_lm's per-window log-likelihoods: one per window, in window order, summing to the perplexity's total."""

import json
import math

import pytest
import tiny_decoders
import torch
import torch.nn.functional as F

from bab.context.attach import set_alpha, set_pruning
from bab.context.evaluate import evaluate_lm
from bab.context.interaction import HARD, PruningConfig
from bab.core import strict_json
from bab.data.lm import lm_windows

CONTEXT = 16


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tiny_decoders.tiny_gpt2(PruningConfig(r=8, init_std=0.5, init_bias=1.0))


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(1)
    return torch.randint(0, 50, (7 * CONTEXT + 3,))


def logits_of(model, x, prune=True):
    """The model's own forward (transformers' GPT-2 with the attached pruning set on or off, hard decisions), not
    bab.context.lm, which evaluate_lm runs through."""
    set_alpha(model, HARD)
    set_pruning(model, prune)
    try:
        return model(x, use_cache=False).logits
    finally:
        set_pruning(model, True)


def reference(model, ids, prune=True, max_windows=None, batch_size=16):
    """The perplexity as evaluate_lm computed it before it kept windows: one summed cross-entropy per batch."""
    x, y = lm_windows(ids, CONTEXT, max_windows)
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = logits_of(model, x[i: i + batch_size], prune)
            nll += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[i: i + batch_size].reshape(-1),
                                   reduction="sum").item()
            count += y[i: i + batch_size].numel()
    return nll, count


@pytest.mark.parametrize("prune", [True, False])
def test_window_nll_sums_to_the_perplexity_and_the_old_numbers_stand(model, ids, prune):
    result = evaluate_lm(model, ids, CONTEXT, prune=prune, batch_size=3)  # 7 windows: batches of 3, 3, 1
    nll, count = reference(model, ids, prune=prune, batch_size=3)
    assert result["windows"] == 7 and len(result["window_nll"]) == 7 and result["window_tokens"] == [CONTEXT] * 7
    # the existing numbers, bit for bit
    assert result["val_ce"] == nll / count and result["perplexity"] == math.exp(nll / count)
    # the identity the claims' interval rests on
    total = sum(result["window_nll"]) / sum(result["window_tokens"])
    assert math.exp(total) == pytest.approx(result["perplexity"], rel=1e-6)
    assert all(w > 0 for w in result["window_nll"])


def test_window_nll_is_each_window_in_order(model, ids):
    result = evaluate_lm(model, ids, CONTEXT, max_windows=5, batch_size=2)
    x, y = lm_windows(ids, CONTEXT, 5)
    with torch.no_grad():  # each window alone: its own summed cross-entropy
        alone = [F.cross_entropy(logits_of(model, x[i: i + 1])[0], y[i], reduction="sum").item()
                 for i in range(5)]
    assert result["window_nll"] == pytest.approx(alone, rel=1e-5)
    assert len(set(round(w, 3) for w in alone)) == 5  # distinct windows, so the order is tested


def test_window_units_survive_the_run_cache_json(model, ids):
    result = evaluate_lm(model, ids, CONTEXT, max_windows=3)
    assert json.loads(strict_json.dumps(result)) == result
