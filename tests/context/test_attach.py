"""Dynamic context pruning attached to transformers' own decoders (bab.context.attach) and the cache that removes
dropped tokens (bab.context.pruned_cache): against bab's own GPT-2 / Llama decoders on copied weights, against
references written out here for Qwen2 and Mistral, and cached generation against the full forward pass."""

import math

import pytest
import tiny_decoders
import torch
from transformers import (
    DynamicCache,
)

from bab.context.attach import (
    attach,
    context_state,
    interactions,
    load_attached,
    set_alpha,
    set_budget,
    set_pruning,
    token_drop_times,
)
from bab.context.interaction import HARD, PruningConfig
from bab.context.pruned_cache import PrunedCache

quiet_transformers = tiny_decoders.quiet_transformers
NO_SPECIAL, LLAMA_LIKE = tiny_decoders.NO_SPECIAL, tiny_decoders.LLAMA_LIKE
ARCHS = tiny_decoders.architectures(n_positions=64)
# scores spread around 0, so a fair share of tokens drops in a random tiny model
PRUNING = PruningConfig(r=8, init_std=0.5, init_bias=1.0)


def hf_model(arch: str, seed: int = 0, **overrides):
    """A random transformers model with weights at unit-ish scale (clear argmax margins, errors that show)."""
    torch.manual_seed(seed)
    model_class, config = ARCHS[arch]
    return tiny_decoders.unit_scale_(model_class(config(**overrides)))


def prompt(batch: int = 2, length: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 97, (batch, length), generator=torch.Generator().manual_seed(seed))  # 0 is the pad id


@torch.no_grad()
def greedy_by_full_forward(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The reference continuation: the whole hard forward recomputed for every new token, no cache."""
    for _ in range(steps):
        ids = torch.cat([ids, model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def generate(model, ids, steps, cache=None, attention_mask=None):
    cache = PrunedCache() if cache is None else cache
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask
    return model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=steps, do_sample=False,
                          pad_token_id=0), cache


# ---------------------------------------------------------------------- references written out here


def loop_log_keep(interaction, x: torch.Tensor, alpha: float, budget=None) -> torch.Tensor:
    """log I [B, T, T] by explicit loops over the paper's formulas: s_nj = q_n . k_j / sqrt(r) + beta(b),
    p_nj = sigmoid(s_nj) (alpha = 1) or 1[s_nj > 0] (alpha = inf); irreversible: I_kj = prod_{n=j+1..k} p_nj,
    reversible: I_kj = p_kj; 1 on and above the diagonal."""
    q, k = interaction.query(x), interaction.key(x)
    B, T, r = q.shape
    beta = float(interaction.bias_for(budget))
    out = torch.zeros(B, T, T, dtype=torch.float64)
    for b in range(B):
        for kk in range(T):
            for j in range(kk):
                queries = range(j + 1, kk + 1) if interaction.config.irreversible else [kk]
                log_i = 0.0
                for n in queries:
                    s = float(q[b, n] @ k[b, j]) / math.sqrt(r) + beta
                    log_i += (0.0 if s > 0 else -math.inf) if math.isinf(alpha) else -math.log1p(math.exp(-s))
                out[b, kk, j] = log_i
    return out


def attention_inputs(model, ids):
    """Run ``model`` on ids and return each layer's attention input (after the layer's first norm)."""
    inputs = []
    norms = [getattr(block, "input_layernorm", None) or block.ln_1 for block in model.base_model.layers] \
        if hasattr(model.base_model, "layers") else [block.ln_1 for block in model.base_model.h]
    hooks = [norm.register_forward_hook(lambda m, a, out: inputs.append(out)) for norm in norms]
    try:
        logits = model(ids, use_cache=False).logits
    finally:
        for hook in hooks:
            hook.remove()
    return logits, inputs


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
@pytest.mark.parametrize("variant", ["irreversible", "propagate", "reversible", "budget"])
def test_every_layers_log_keep_equals_the_loop_reference(arch, variant):
    pruning = PruningConfig(r=8, init_std=0.5, init_bias=1.0, irreversible=variant != "reversible",
                            propagate_in_depth=variant == "propagate", budget_conditioned=variant == "budget")
    model = attach(hf_model(arch), pruning)
    budget = 0.4 if variant == "budget" else None
    set_budget(model, budget)
    ids = prompt()
    dropped_somewhere = False
    for alpha in (1.0, HARD):
        set_alpha(model, alpha)
        with torch.no_grad():
            _, inputs = attention_inputs(model, ids)
            state = context_state(model)
            below = torch.zeros(1)
            for layer, (interaction, x) in enumerate(zip(interactions(model), inputs, strict=True)):
                own = loop_log_keep(interaction, x, alpha, budget)
                torch.testing.assert_close(state.own[layer].double(), own, atol=1e-5, rtol=1e-5)
                effective = own + below if pruning.propagate_in_depth else own
                torch.testing.assert_close(state.effective[layer].double(), effective, atol=1e-5, rtol=1e-5)
                below = effective
                dropped_somewhere |= bool(torch.isinf(own).any())
    assert dropped_somewhere  # hard decisions drop some tokens: the comparison means something


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
def test_soft_logits_equal_plain_model_with_log_keep_as_additive_mask(arch):
    """One layer, so one mask: at alpha = 1 the attached model equals the plain one given causal + log I (the loop's)
    as a float 4-D mask."""
    plain = hf_model(arch, **({"n_layer": 1} if arch == "gpt2" else {"num_hidden_layers": 1}))
    pruned = attach(hf_model(arch, **({"n_layer": 1} if arch == "gpt2" else {"num_hidden_layers": 1})), PRUNING)
    set_alpha(pruned, 1.0)
    ids = prompt()
    with torch.no_grad():
        logits, (x,) = attention_inputs(pruned, ids)
        T = ids.shape[1]
        causal = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        mask = (causal + loop_log_keep(interactions(pruned)[0], x, 1.0).float())[:, None]
        torch.testing.assert_close(logits, plain(ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-5)


def test_reversible_ablation_refuses_the_pruned_cache():
    model = attach(hf_model("gpt2"), PruningConfig(r=8, init_std=0.5, init_bias=1.0, irreversible=False))
    with torch.no_grad(), pytest.raises(ValueError, match="irreversible"):
        model(prompt(), past_key_values=PrunedCache())


def test_sparsity_terms_follow_their_formulas_and_carry_gradient():
    model = attach(hf_model("llama"), PRUNING)
    ids = prompt()
    set_alpha(model, 2.0)
    model(ids)
    state = context_state(model)
    terms = state.sparsity_terms()
    assert len(terms) == 2
    T = ids.shape[1]
    below = torch.ones(T, T, dtype=torch.bool).tril(-1)
    for term, own in zip(terms, state.own, strict=True):
        torch.testing.assert_close(term, own.exp()[:, below].mean())  # the mean of I over the pairs k > j
    official = torch.stack([own[:, :-1, :].exp().mean() for own in state.own]).mean()  # every entry, last row out
    torch.testing.assert_close(state.sparsity("official"), official)
    state.sparsity().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in interactions(model)[0].query.parameters())


def test_budget_conditioned_keeps_less_at_a_smaller_budget_and_generates_as_the_full_forward():
    model = attach(hf_model("gpt2"), PruningConfig(r=8, init_std=0.5, init_bias=1.0, budget_conditioned=True))
    ids = prompt()
    masses = []
    with torch.no_grad():
        for budget in (0.2, 0.9):
            set_budget(model, budget)
            set_alpha(model, 1.0)
            model(ids)
            masses.append(context_state(model).keep_mass())
            set_alpha(model, HARD)
            generated, _ = generate(model, ids, 4)
            assert torch.equal(generated, greedy_by_full_forward(model, ids, 4))
    assert masses[0] < masses[1]
    with pytest.raises(ValueError, match="budget"):
        set_budget(model, None)


# ---------------------------------------------------------------------- Qwen2 and Mistral: references written out here


def loop_first_drops(interaction, x: torch.Tensor) -> torch.Tensor:
    """[B, T]: the first query n > j with s_nj <= 0 (T: never), by explicit loops over the scores' formula."""
    q, k = interaction.query(x), interaction.key(x)
    B, T, r = q.shape
    first = torch.full((B, T), T)
    for b in range(B):
        for j in range(T):
            for n in range(j + 1, T):
                if float(q[b, n] @ k[b, j]) / math.sqrt(r) + float(interaction.bias) <= 0:
                    first[b, j] = n
                    break
    return first


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_huge_bias_keeps_everything_and_equals_plain_model(arch):
    plain = hf_model(arch)
    pruned = attach(hf_model(arch), PruningConfig(r=8, init_bias=1e4))
    ids = prompt()
    with torch.no_grad():
        expected = plain(ids).logits
        for alpha in (1.0, HARD):
            set_alpha(pruned, alpha)
            torch.testing.assert_close(pruned(ids).logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_hard_logits_equal_plain_model_under_loop_mask(arch):
    """One layer, so one mask: the plain transformers model given the loop's visibility as a 4D mask."""
    plain = hf_model(arch, num_hidden_layers=1)
    pruned = attach(hf_model(arch, num_hidden_layers=1), PRUNING)
    ids = prompt()
    with torch.no_grad():
        x = pruned.model.layers[0].input_layernorm(pruned.model.embed_tokens(ids))
        first = loop_first_drops(interactions(pruned)[0], x)
        T = ids.shape[1]
        rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
        visible = (cols <= rows) & (rows < first[:, None, :])  # [B, T, T]
        assert not visible.tril().all()
        torch.testing.assert_close(pruned(ids).logits, plain(ids, attention_mask=visible[:, None]).logits,
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_drop_times_equal_loop_reference(arch):
    model = attach(hf_model(arch), PRUNING)
    ids = prompt()
    inputs = []
    hooks = [layer.input_layernorm.register_forward_hook(lambda m, a, out: inputs.append(out))
             for layer in model.model.layers]
    times = token_drop_times(model, ids)
    for hook in hooks:
        hook.remove()
    T = ids.shape[1]
    for layer_times, interaction, x in zip(times, interactions(model), inputs, strict=True):
        with torch.no_grad():
            first = loop_first_drops(interaction, x)
        assert torch.equal(layer_times, torch.where(first < T, first, -1))
    assert (times >= 0).any()


# ---------------------------------------------------------------------- the cache that removes tokens


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
def test_generate_with_pruned_cache_equals_full_forward(arch):
    model = attach(hf_model(arch), PRUNING)
    ids = prompt()
    generated, cache = generate(model, ids, 8)
    assert torch.equal(generated, greedy_by_full_forward(model, ids, 8))
    assert cache.get_seq_length() == ids.shape[1] + 7  # tokens seen (the last one is never fed back), not kept
    assert (cache.live_tokens() < cache.get_seq_length()).all()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_cached_steps_without_generate_take_positions_from_tokens_seen(arch):
    """The model's own forward derives position ids (GPT-2's learned positions, Llama's RoPE) from get_seq_length:
    with tokens dropped, the prompt in two chunks and then one token at a time give the full forward's logits."""
    model = attach(hf_model(arch), PRUNING)
    ids = prompt(length=14)
    cache = PrunedCache()
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        chunks = [model(ids[:, :6], past_key_values=cache).logits, model(ids[:, 6:10], past_key_values=cache).logits]
        chunks += [model(ids[:, t:t + 1], past_key_values=cache).logits for t in range(10, 14)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.get_seq_length() == 14 and (cache.live_tokens() < 14).all()


def test_beam_search_with_pruned_cache_equals_beam_search_without_cache():
    """Beam search reorders the cache's rows (``reorder_cache``); without a cache every step is the full forward."""
    model = attach(hf_model("llama"), PRUNING)
    ids = prompt()
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, num_beams=3,
                    pad_token_id=0)
    cached = model.generate(ids, past_key_values=PrunedCache(), **settings)
    assert torch.equal(cached, model.generate(ids, use_cache=False, **settings))


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
def test_propagate_in_depth_cached_generation_equals_full_forward(arch):
    hf = attach(hf_model(arch), PruningConfig(r=8, init_std=0.5, init_bias=1.0, propagate_in_depth=True))
    ids = prompt()
    generated, cache = generate(hf, ids, 8)
    assert torch.equal(generated, greedy_by_full_forward(hf, ids, 8))
    below, above = cache.layers[0], cache.layers[1]
    for row in range(ids.shape[0]):  # what a layer dropped, the layer above dropped too
        held_above = set(above.positions[row][above.valid[row]].tolist())
        assert held_above <= set(below.positions[row][below.valid[row]].tolist())


def test_prefill_keeps_what_the_last_prompt_token_sees():
    model = attach(hf_model("llama"), PRUNING)
    ids = prompt()
    cache = PrunedCache()
    with torch.no_grad():
        model(ids, past_key_values=cache)
        model(ids, use_cache=False)
    for layer, effective in zip(cache.layers, context_state(model).effective, strict=True):
        for row in range(ids.shape[0]):
            alive = set(torch.nonzero(effective[row, -1] > -math.inf).flatten().tolist())
            assert set(layer.positions[row][layer.valid[row]].tolist()) == alive


def test_cache_bytes_shrink_with_the_tokens_dropped():
    model = attach(hf_model("llama"), PRUNING)
    ids = prompt(batch=1, length=24)
    cache = PrunedCache()
    with torch.no_grad():
        model(ids, past_key_values=cache)
    heads, head_dim, r = 2, 8, PRUNING.r
    per_token = (2 * heads * head_dim + r) * 4 + 8 + 1  # keys, values, interaction keys (float32); position, valid
    live = cache.live_tokens()[:, 0]
    assert (live < 24).all()
    for layer, n in zip(cache.layers, live.tolist(), strict=True):
        assert layer.live_nbytes() == n * per_token
        # held as allocated: the prompt's slots, or (when its drops freed enough to compact) n plus 1/SLACK spare
        slots = layer.slots()
        assert layer.nbytes() == slots * per_token and layer.keys.shape[2] == slots
        assert slots == (24 + max(24 // layer.SLACK, 1) if layer.used == 24 else n + max(n // layer.SLACK, 1))
        assert layer.used - n < layer.COMPACT_AT * layer.used
    dense = DynamicCache(config=model.config)
    set_pruning(model, False)
    with torch.no_grad():
        model(ids, past_key_values=dense)
    dense_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in dense.layers)
    assert dense_bytes == 24 * len(live) * 2 * heads * head_dim * 4  # every token, keys and values
    assert cache.live_nbytes() == int(live.sum()) * per_token < cache.nbytes()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_batch_rows_that_drop_different_tokens(arch):
    model = attach(hf_model(arch), PRUNING)
    ids = prompt(batch=3, length=10, seed=1)
    generated, cache = generate(model, ids, 6)
    live = cache.live_tokens()
    assert (live != live[:, :1]).any()  # the rows hold different numbers of tokens: padded slots are in play
    for row in range(3):
        alone, _ = generate(model, ids[row:row + 1], 6)
        assert torch.equal(generated[row:row + 1], alone)
    # a left-padded shorter prompt continues as it does alone (positions from the attention mask)
    short = prompt(batch=1, length=6, seed=2)
    padded = torch.cat([torch.cat([torch.zeros(1, 4, dtype=torch.long), short], dim=1), ids[:1]])
    mask = (torch.arange(10)[None, :] >= torch.tensor([[4], [0]])).long()
    batched, _ = generate(model, padded, 5, attention_mask=mask)
    alone, _ = generate(model, short, 5)
    assert torch.equal(batched[0, 4:], alone[0])


def test_pruned_cache_refuses_soft_decisions_and_a_plain_cache_refuses_a_pruned_continuation():
    model = attach(hf_model("gpt2"), PRUNING)
    ids = prompt()
    set_alpha(model, 1.0)
    with pytest.raises(ValueError, match="hard decisions"), torch.no_grad():
        model(ids, past_key_values=PrunedCache())
    set_alpha(model, HARD)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids, past_key_values=cache)
        with pytest.raises(ValueError, match="PrunedCache"):
            model(ids[:, :1], past_key_values=cache)


# ---------------------------------------------------------------------- saving and loading


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_save_pretrained_round_trip(arch, tmp_path):
    model = attach(hf_model(arch), PRUNING)
    ids = prompt()
    names = [n for n, _ in model.named_parameters() if ".interaction." in n]
    assert len(names) == 2 * 5  # per layer: query and key weight and bias, the bias beta
    with torch.no_grad():
        expected = model(ids).logits
    model.save_pretrained(tmp_path)
    reloaded = load_attached(type(model), str(tmp_path)).eval()
    for name in names:
        assert torch.equal(reloaded.state_dict()[name], model.state_dict()[name])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, expected, atol=1e-6, rtol=1e-6)
