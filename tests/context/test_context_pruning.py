"""Dynamic context pruning: the alpha-sigmoid, the cumulative product, the losses and the schedule."""

import math

import pytest
import tiny_decoders
import torch
from entmax import entmax_bisect

from bab.context.interaction import (
    ContextInteraction,
    PruningConfig,
    alpha_sigmoid,
    cosine_alpha,
    drop_times,
    keep_mass,
)
from bab.context.lm import lm_forward, pruning_parameters
from bab.core.losses import context_pruning_loss


def test_alpha_one_is_the_sigmoid_and_alpha_inf_the_step():
    s = torch.linspace(-4, 4, 17)
    assert torch.allclose(alpha_sigmoid(s, 1.0), torch.sigmoid(s))
    assert torch.equal(alpha_sigmoid(s, math.inf), (s > 0).float())


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0, 4.0, 8.0])
def test_alpha_sigmoid_matches_entmax(alpha):
    torch.manual_seed(0)
    s = torch.randn(4000) * 0.6
    p = alpha_sigmoid(s, alpha)
    # entmax_bisect in float64 is exact enough away from the band edge |(alpha - 1) s| = 1
    safe = (s.abs() * (alpha - 1)) < 0.9
    s64 = s.double()
    ref = entmax_bisect(torch.stack([s64, torch.zeros_like(s64)], -1), alpha=alpha, n_iter=200)[..., 0]
    assert torch.allclose(p[safe].double(), ref[safe], atol=1e-5)
    # everywhere: the two-coordinate optimality condition p^(a-1) - (1-p)^(a-1) = (a-1) s, or the clipped ends
    inside = (s.abs() * (alpha - 1)) < 1
    lhs = p[inside].double().pow(alpha - 1) - (1 - p[inside].double()).pow(alpha - 1)
    assert torch.allclose(lhs, (alpha - 1) * s64[inside], atol=1e-5)
    assert torch.equal(p[~inside], (s[~inside] > 0).float())


@pytest.mark.parametrize("alpha", [1.0, 1.5, 8.0, 1e4])
def test_gradients_are_finite_for_small_and_large_alpha(alpha):
    torch.manual_seed(0)
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=4, init_std=0.5, init_bias=0.5), resid_pdrop=0.1,
                                    embd_pdrop=0.1, attn_pdrop=0.1).train()  # as the old test: dropout on
    ids = torch.randint(0, 50, (2, 24))
    out = lm_forward(model, ids, alpha=alpha)
    loss = context_pruning_loss(out.logits[:, :-1], ids[:, 1:], out.keep_mass, gamma=0.1)
    loss.backward()
    assert torch.isfinite(loss)
    assert not torch.isnan(out.logits).any()
    grads = [p.grad for _, p in pruning_parameters(model) if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert 0.0 <= out.keep_mass.item() <= 1.0


def _interaction(irreversible=True):
    torch.manual_seed(1)
    return ContextInteraction(8, PruningConfig(r=4, init_std=1.0, init_bias=0.3, irreversible=irreversible))


def test_cumulative_product_makes_dropping_irreversible_and_never_drops_self():
    inter = _interaction()
    x = torch.randn(2, 20, 8)
    with torch.no_grad():
        log_keep, _ = inter.log_keep(x, math.inf, None)
        scores = inter.scores(inter.query(x), inter.key(x), None)
    alive = log_keep > -math.inf
    assert alive.diagonal(dim1=1, dim2=2).all()  # I_kk = 1
    # once j is invisible to k it is invisible to every later query
    later_alive = alive[:, 1:] & ~alive[:, :-1]
    assert not later_alive.tril(-1).any()
    # and I_kj is exactly the product of the step decisions p_nj for n = j+1..k
    p = (scores > 0).float()
    for k in range(20):
        for j in range(k):
            assert torch.equal(alive[:, k, j].float(), p[:, j + 1: k + 1, j].prod(dim=1))
    # some pairs really are dropped with these weights
    assert not alive.tril(-1)[:, 1:].all()


def test_reversible_ablation_uses_only_the_current_decision():
    inter = _interaction(irreversible=False)
    x = torch.randn(2, 12, 8)
    with torch.no_grad():
        log_keep, _ = inter.log_keep(x, math.inf, None)
        scores = inter.scores(inter.query(x), inter.key(x), None)
    below = torch.ones(12, 12, dtype=torch.bool).tril(-1)
    assert torch.equal((log_keep > -math.inf)[:, below], (scores > 0)[:, below])


def test_keep_mass_and_drop_times():
    inter = _interaction()
    x = torch.randn(1, 16, 8)
    with torch.no_grad():
        log_keep, _ = inter.log_keep(x, math.inf, None)
    alive = (log_keep[0] > -math.inf).float()
    below = torch.ones(16, 16, dtype=torch.bool).tril(-1)
    assert keep_mass(log_keep).item() == pytest.approx(alive[below].mean().item())
    times = drop_times(log_keep)[0]
    for j in range(16):
        seen_by = torch.nonzero(alive[:, j]).flatten()
        if times[j] == -1:
            assert seen_by.max() == 15
        else:
            assert seen_by.max() == times[j] - 1 and not alive[times[j]:, j].any()


def test_cosine_alpha_schedule():
    assert cosine_alpha(0, 100) == 1.0
    assert cosine_alpha(99, 100) == pytest.approx(8.0)
    values = [cosine_alpha(s, 100) for s in range(100)]
    assert all(a <= b for a, b in zip(values, values[1:], strict=False))
    with pytest.raises(ValueError):
        cosine_alpha(0, 0)


def test_bad_alpha_gamma_and_budget_raise():
    with pytest.raises(ValueError, match="alpha"):
        alpha_sigmoid(torch.zeros(3), 0.5)
    with pytest.raises(ValueError, match="gamma"):
        context_pruning_loss(torch.zeros(1, 2, 5), torch.zeros(1, 2, dtype=torch.long), torch.tensor(1.0), -1.0)
    inter = _interaction()
    with pytest.raises(ValueError, match="not budget-conditioned"):
        inter.bias_for(0.5)


def test_budget_conditioned_bias_is_monotone_in_the_budget():
    inter = ContextInteraction(8, PruningConfig(r=4, budget_conditioned=True))
    biases = [inter.bias_for(b).item() for b in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert all(a < b for a, b in zip(biases, biases[1:], strict=False))
    with pytest.raises(ValueError, match="needs budget="):
        inter.bias_for(None)
    with pytest.raises(ValueError, match="budget"):
        inter.bias_for(1.5)
