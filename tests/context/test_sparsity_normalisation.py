"""The sparsity regulariser's two normalisations and the official initial values, against loops written out here."""

import math

import pytest
import tiny_decoders
import torch

from bab.context.interaction import ContextInteraction, PruningConfig, sparsity_term
from bab.context.lm import lm_forward
from bab.context.train import LMTrainConfig, train_lm
from bab.core.runs import config_difference


def _soft_log_keep(T=9, batch=2, seed=3):
    """log I [B, T, T] of a real interaction at alpha = 1 (the sigmoid): every causal I strictly between 0 and 1,
    none so small that exp underflows (the gradient test divides by I)."""
    torch.manual_seed(seed)
    inter = ContextInteraction(8, PruningConfig(r=4, init_std=0.5, init_bias=1.0)).double()
    log_keep, _ = inter.log_keep(torch.randn(batch, T, 8, dtype=torch.float64), 1.0, None)
    return log_keep


def _loop_causal_pairs(log_keep):
    """Mean of I_kj over every (b, k, j) with k > j."""
    B, T, _ = log_keep.shape
    total, count = 0.0, 0
    for b in range(B):
        for k in range(T):
            for j in range(k):
                total += math.exp(log_keep[b, k, j].item())
                count += 1
    return total / count


def _loop_official(log_keep):
    """The official code's mean over cumprobs[..., :-1, :]: query rows 0..T-2, every key column, I = 1 for j >= k."""
    B, T, _ = log_keep.shape
    total, count = 0.0, 0
    for b in range(B):
        for k in range(T - 1):
            for j in range(T):
                total += 1.0 if j >= k else math.exp(log_keep[b, k, j].item())
                count += 1
    return total / count


def test_both_normalisations_equal_their_loops():
    log_keep = _soft_log_keep()
    assert sparsity_term(log_keep, "causal_pairs").item() == pytest.approx(_loop_causal_pairs(log_keep), abs=1e-12)
    assert sparsity_term(log_keep, "official").item() == pytest.approx(_loop_official(log_keep), abs=1e-12)
    # the two differ (the official one counts the constant ones), so the check above can tell them apart
    assert abs(sparsity_term(log_keep, "official").item() - _loop_causal_pairs(log_keep)) > 1e-3


@pytest.mark.parametrize("T", [5, 12])
def test_official_weighs_each_pair_half_and_ignores_the_last_query_row(T):
    """d term / d I_kj: causal pairs 2 / (T (T - 1)) per pair; official 1 / (T (T - 1)) outside the last row,
    0 in it."""
    B = 2
    for normalisation in ("causal_pairs", "official"):
        log_keep = _soft_log_keep(T=T, batch=B).detach().requires_grad_(True)
        sparsity_term(log_keep, normalisation).backward()
        keep = log_keep.detach().exp()  # I
        assert ((keep > 1e-6) & (keep < 1)).tril(-1)[:, 1:].any() and (keep > 1e-6).all()
        grad_wrt_keep = log_keep.grad / keep  # d/d log I = I * d/dI
        for k in range(T):
            for j in range(k):
                if normalisation == "causal_pairs":
                    expected = 2.0 / (B * T * (T - 1))
                else:
                    expected = 0.0 if k == T - 1 else 1.0 / (B * T * (T - 1))
                got = grad_wrt_keep[0, k, j].item()
                assert got == pytest.approx(expected, rel=1e-9, abs=1e-15), (normalisation, k, j)


def test_unknown_normalisation_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="causal_pairs"):
        sparsity_term(_soft_log_keep(), "pairs")
    with pytest.raises(ValueError, match="sparsity_normalisation must be one of"):
        LMTrainConfig(objective="context_pruning", sparsity_normalisation="Official")
    with pytest.raises(ValueError, match="context_pruning"):
        LMTrainConfig(objective="budget_context", sparsity_normalisation="official")


def _tiny(pruning):
    torch.manual_seed(0)
    return tiny_decoders.tiny_gpt2(pruning, vocab_size=40, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1).train()


def test_decoder_sparsity_is_the_layer_mean_of_the_loop():
    model = _tiny(PruningConfig(r=4, init_std=1.0, init_bias=0.5)).double()
    ids = torch.randint(0, 40, (2, 10))
    out = lm_forward(model, ids, alpha=1.5, return_log_keep=True, sparsity_normalisation="official")
    loops = [_loop_official(lk) for lk in out.log_keep]  # no depth propagation: effective = own I
    assert out.sparsity.item() == pytest.approx(sum(loops) / len(loops), abs=1e-12)
    assert out.keep_mass.item() == pytest.approx(sum(_loop_causal_pairs(lk) for lk in out.log_keep) / 2, abs=1e-12)
    default = lm_forward(model, ids, alpha=1.5)
    assert default.sparsity is default.keep_mass


def test_training_uses_the_normalisation_it_is_given():
    """The loss a training step logs is CE + gamma times the chosen term (the causal-pairs mass only under its own
    name)."""
    ids = torch.randint(0, 40, (400,), generator=torch.Generator().manual_seed(0))
    for normalisation in ("causal_pairs", "official"):
        model = _tiny(PruningConfig(r=4, init_bias=0.5))
        config = LMTrainConfig(objective="context_pruning", steps=1, batch_size=2, context=12, gamma=10.0, seed=0,
                               sparsity_normalisation=normalisation)
        result = train_lm(model, ids, config, progress=False, log_every=1)
        row = result.history[-1]
        # the row's keep mass is always the causal-pairs one; the loss adds gamma times the chosen term
        term = (row["loss"] - row["train_ce"]) / 10.0
        if normalisation == "causal_pairs":
            assert term == pytest.approx(row["keep_mass"], rel=1e-5)
        else:
            assert term > row["keep_mass"] + 1e-3  # the official term counts the constant ones


def test_official_initial_values():
    config = PruningConfig.official()
    assert config.init_bias == 5.0 and not config.interaction_bias
    inter = ContextInteraction(16, config)
    assert inter.query.bias is None and inter.key.bias is None
    assert inter.bias.item() == 5.0
    assert [name for name, _ in inter.named_parameters()] == ["bias", "query.weight", "key.weight"]
    assert PruningConfig.official(r=8).r == 8
    # ours keeps the bias terms (zero at the start)
    ours = ContextInteraction(16, PruningConfig())
    assert ours.query.bias is not None and not ours.query.bias.any()


def test_options_at_their_defaults_leave_the_cache_keys_unchanged():
    """At their defaults the options are left out of what the run cache hashes; set, they are in."""
    assert "interaction_bias" not in config_difference(PruningConfig())
    assert config_difference(PruningConfig.official())["interaction_bias"] is False
    assert "sparsity_normalisation" not in config_difference(LMTrainConfig())
    assert config_difference(LMTrainConfig(objective="context_pruning", sparsity_normalisation="official"))[
        "sparsity_normalisation"] == "official"
