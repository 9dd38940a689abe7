"""Keep / drop decisions in float32 whatever the model's dtype (ContextInteraction.project, .scores): a bfloat16
decoder drops the same tokens in cached generation as in its full forward, in every layer at every step, and its
cached logits stay as close to the full forward's as the dense bfloat16 model's own cached logits stay to its full
forward; a float32 model computes exactly what plain float32 linear layers compute."""

import math

import pytest
import tiny_decoders
import torch
from transformers import DynamicCache

from bab.context.attach import attach, context_state
from bab.context.interaction import ContextInteraction, PruningConfig
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers
PRUNING = PruningConfig(r=8, init_std=0.5, init_bias=1.0)
PROMPT, STEPS = 40, 24


def tiny_llama(seed: int, dtype: torch.dtype):
    model_class, config = tiny_decoders.architectures(64)["llama"]
    torch.manual_seed(seed)
    model = model_class(config(num_hidden_layers=3, max_position_embeddings=128))
    return tiny_decoders.unit_scale_(model).to(dtype)


def greedy_steps(model, ids, cache, on_step):
    """Prompt through ``cache``, then STEPS greedy tokens one at a time; ``on_step(sequence, cached last logits)``."""
    out = model(ids, past_key_values=cache).logits[:, -1]
    sequence = ids
    for _ in range(STEPS):
        token = out.argmax(-1, keepdim=True)
        sequence = torch.cat([sequence, token], dim=1)
        out = model(token, past_key_values=cache).logits[:, -1]
        on_step(sequence, out)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@torch.no_grad()
def test_bfloat16_cached_generation_drops_what_the_full_forward_drops(seed):
    ids = torch.randint(1, 97, (2, PROMPT), generator=torch.Generator().manual_seed(seed))
    dense = tiny_llama(seed, torch.bfloat16)
    dense_gap = []
    greedy_steps(dense, ids, DynamicCache(config=dense.config), lambda seq, out: dense_gap.append(
        (out.float() - dense(seq).logits[:, -1].float()).abs().max()))

    model = attach(dense, PRUNING)
    assert next(model.parameters()).dtype == torch.bfloat16
    gaps, compared, dropped = [], 0, 0
    cache = PrunedCache()

    def compare(sequence, out):
        nonlocal compared, dropped
        full = model(sequence, use_cache=False).logits[:, -1]  # every layer's log I of the whole sequence
        gaps.append((out.float() - full.float()).abs().max())
        for layer, effective in zip(cache.layers, context_state(model).effective, strict=True):
            assert effective.dtype == torch.float32
            for row in range(sequence.shape[0]):
                seen_by_last = set(torch.nonzero(effective[row, -1] > -math.inf).flatten().tolist())
                held = set(layer.positions[row][layer.valid[row]].tolist())
                assert held == seen_by_last  # the cache holds exactly what the full forward's last query sees
                compared += 1
                dropped += sequence.shape[1] - len(held)

    greedy_steps(model, ids, cache, compare)
    assert compared == STEPS * 3 * 2 and dropped > 0
    assert max(gaps) <= 2 * max(dense_gap)  # bfloat16's own cached-vs-full difference (a logit's last bits)


def test_a_float32_model_computes_the_plain_linear_layers_exactly():
    torch.manual_seed(0)
    interaction = ContextInteraction(16, PruningConfig(r=8, init_std=0.5, init_bias=1.0))
    x = torch.randn(2, 9, 16)
    q_int, k_int = interaction.project(x)
    assert torch.equal(q_int, interaction.query(x)) and torch.equal(k_int, interaction.key(x))
    expected = (interaction.query(x) / math.sqrt(8)) @ interaction.key(x).transpose(1, 2) + interaction.bias
    assert torch.equal(interaction.scores(q_int, k_int, None), expected)


def test_a_bfloat16_interaction_scores_in_float32_from_its_own_weights():
    torch.manual_seed(0)
    interaction = ContextInteraction(16, PruningConfig(r=8, init_std=0.5, init_bias=1.0)).to(torch.bfloat16)
    x = torch.randn(2, 9, 16).to(torch.bfloat16)
    q_int, k_int = interaction.project(x)
    w_q, w_k = interaction.query.weight.float(), interaction.key.weight.float()
    expected_q = x.float() @ w_q.T + interaction.query.bias.float()
    expected_k = x.float() @ w_k.T + interaction.key.bias.float()
    assert q_int.dtype == torch.float32
    torch.testing.assert_close(q_int, expected_q, atol=1e-6, rtol=1e-6)
    # the keys are kept (and cached) at the model's size: the float32 projection rounded once
    assert k_int.dtype == torch.bfloat16 and torch.equal(k_int, expected_k.to(torch.bfloat16))
    scores = interaction.scores(q_int, k_int, None)
    assert scores.dtype == torch.float32
    expected = (expected_q / math.sqrt(8)) @ k_int.float().transpose(1, 2) + interaction.bias.item()
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    # in bfloat16 the same scores would carry rounding errors of ~2^-8 of their size: enough to flip a decision
    assert (scores - expected).abs().max() < 1e-5
