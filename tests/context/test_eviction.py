"""Training-free eviction policies (bab.context.eviction) in transformers' decoders through EvictingCache
(bab.context.evicting_cache): against plain generation, against full forwards under masks written out here, and
against reference loops that evict from the attention weights an eager model returns."""

import math

import pytest
import tiny_decoders
import torch
from transformers import (
    DynamicCache,
)

from bab.context.attach import attach
from bab.context.evicting_cache import EvictingCache, enable_eviction, evaluate_eviction
from bab.context.eviction import H2O, TOVA, SnapKV, StreamingLLM, budget_for_fraction, pairs_kept
from bab.context.interaction import PruningConfig

quiet_transformers = tiny_decoders.quiet_transformers
NO_SPECIAL, LLAMA_LIKE = tiny_decoders.NO_SPECIAL, tiny_decoders.LLAMA_LIKE
ARCHS = tiny_decoders.architectures(n_positions=128)
LAYERS = {"gpt2": "n_layer", "llama": "num_hidden_layers", "qwen2": "num_hidden_layers",
          "mistral": "num_hidden_layers"}


def kept_positions(layer, row: int = 0, head: int = 0) -> list[int]:
    """The positions row ``row`` of an evicting cache layer holds, in order, for key/value head ``head`` (all heads
    hold the layer's set unless the policy keeps one per head)."""
    head = head if layer.positions.shape[1] > 1 else 0
    return layer.positions[row, head][layer.valid[row, head]].tolist()


def hf_model(arch: str, seed: int = 0, layers: int = 2, **overrides):
    """A random transformers model with weights at unit-ish scale (peaked attention, clear argmax margins)."""
    torch.manual_seed(seed)
    model_class, config = ARCHS[arch]
    return tiny_decoders.unit_scale_(model_class(config(**{LAYERS[arch]: layers}, **overrides)))


def prompt(batch: int = 2, length: int = 10, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 97, (batch, length), generator=torch.Generator().manual_seed(seed))  # 0 is the pad id


def generate(model, ids, steps, cache, attention_mask=None):
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask
    return model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=steps, do_sample=False,
                          pad_token_id=0)


POLICIES = {"streaming": lambda budget: StreamingLLM(budget, sinks=2), "tova": TOVA, "h2o": H2O,
            "snapkv": lambda budget: SnapKV(budget, window=3, kernel=3)}


# ---------------------------------------------------------------------- (a) a budget that keeps everything


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
@pytest.mark.parametrize("policy", ["streaming", "tova", "h2o", "snapkv"])
def test_budget_covering_the_sequence_generates_as_a_dynamic_cache(arch, policy):
    ids = prompt()
    expected = generate(hf_model(arch), ids, 8, DynamicCache())
    model = enable_eviction(hf_model(arch))
    for budget in (18, 1.0):  # 10 prompt tokens + 8 generated, the last never fed back
        cache = EvictingCache(POLICIES[policy](budget))
        assert torch.equal(generate(model, ids, 8, cache), expected)
        assert (cache.live_tokens() == 17).all() and cache.get_seq_length() == 17
        assert cache.fraction_kept() == 1.0


# ---------------------------------------------------------------------- (b) StreamingLLM under its written-out mask


def streaming_mask(length: int, sinks: int, window: int, prompt_length: int = 1) -> torch.Tensor:
    """[length, length] bool: query t sees itself and what the cache held before it, the first ``sinks`` tokens and
    the ``window`` before it; the prompt's queries (one call) see every earlier prompt token."""
    mask = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for j in range(t + 1):
            mask[t, j] = t < prompt_length or j < sinks or j >= t - window
    return mask


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_streaming_llm_keeps_sinks_and_window_and_equals_the_masked_full_forward(arch):
    plain, model = hf_model(arch), enable_eviction(hf_model(arch))
    ids = prompt(length=16)
    cache = EvictingCache(StreamingLLM(6, sinks=2))
    with torch.no_grad():
        steps = [model(ids[:, t:t + 1], past_key_values=cache).logits for t in range(16)]
        expected = plain(ids, attention_mask=streaming_mask(16, 2, 4)[None, None].expand(2, 1, 16, 16)).logits
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-5, rtol=1e-5)
    for layer in cache.layers:
        assert kept_positions(layer, 0) == kept_positions(layer, 1) == [0, 1, 12, 13, 14, 15]
    assert cache.get_seq_length() == 16

    # generate: the prompt attends in full, then is cut to sinks + window; greedy, token by token
    ids = prompt(length=8, seed=1)
    cache = EvictingCache(StreamingLLM(6, sinks=2))
    generated = generate(model, ids, 8, cache)
    reference = ids
    with torch.no_grad():
        for _ in range(8):
            n = reference.shape[1]
            mask = streaming_mask(n, 2, 4, prompt_length=8)[None, None].expand(2, 1, n, n)
            reference = torch.cat([reference, plain(reference, attention_mask=mask).logits[:, -1:].argmax(-1)], 1)
    assert torch.equal(generated, reference)
    assert kept_positions(cache.layers[0], 0) == [0, 1, 11, 12, 13, 14]  # 15 tokens fed: the last one never is


# ---------------------------------------------------------------------- (c) TOVA and H2O against reference loops


def reference_evictions(plain, ids: torch.Tensor, policy: str, budget: int, recent: int = 0):
    """One-layer eager model, token by token: the attention of query t over what row b kept, read from
    ``output_attentions`` under a mask of the kept sets, and the eviction of one token when over budget.
    Returns the kept positions of every row and the logits [B, T, V]."""
    B, T = ids.shape
    kept = [[] for _ in range(B)]
    mass = [dict() for _ in range(B)]
    mask = torch.zeros(B, 1, T, T, dtype=torch.bool)
    logits = []
    for t in range(T):
        for b in range(B):
            for j in kept[b] + [t]:
                mask[b, 0, t, j] = True
        # eager attention adds a 4D mask to its logits: give it 0 / -inf (a bool mask would add 1 / 0)
        additive = torch.zeros(B, 1, t + 1, t + 1).masked_fill(~mask[:, :, :t + 1, :t + 1], -math.inf)
        with torch.no_grad():
            out = plain(ids[:, :t + 1], attention_mask=additive, output_attentions=True)
        logits.append(out.logits[:, -1:])
        for b in range(B):
            visible = kept[b] + [t]
            weight = {j: float(out.attentions[0][b, :, t, j].mean()) for j in visible}  # mean over heads
            for j in visible:
                mass[b][j] = mass[b].get(j, 0.0) + weight[j]
            if len(visible) > budget:
                if policy == "tova":  # kvpress's TOVA: the newest token t always stays
                    victim = min(visible[:-1], key=lambda j: weight[j])
                else:  # h2o: the lowest accumulated attention outside the recent tokens
                    victim = min(visible[:len(visible) - recent], key=lambda j: mass[b][j])
                visible.remove(victim)
            kept[b] = visible
    return kept, torch.cat(logits, dim=1)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("policy", ["tova", "h2o"])
def test_attention_policies_keep_what_a_reference_loop_keeps(arch, policy):
    model = enable_eviction(hf_model(arch, layers=1))
    plain = hf_model(arch, layers=1, attn_implementation="eager")
    ids = prompt(length=14, seed=3)
    cache = EvictingCache(TOVA(5) if policy == "tova" else H2O(5, recent=0.5))  # H2O: 3 recent, 2 heavy hitters
    with torch.no_grad():
        logits = torch.cat([model(ids[:, t:t + 1], past_key_values=cache).logits for t in range(14)], dim=1)
    kept, expected_logits = reference_evictions(plain, ids, policy, budget=5, recent=3)
    assert [kept_positions(cache.layers[0], b) for b in range(2)] == kept
    assert kept[0] != list(range(9, 14))  # not a plain sliding window
    if policy == "tova":
        assert kept[0] != kept[1]  # the rows keep different tokens (H2O's accumulated mass favours the first ones)
    torch.testing.assert_close(logits, expected_logits, atol=1e-5, rtol=1e-5)


def reference_snapkv(plain, ids: torch.Tensor, budget: int, window: int, kernel: int,
                     kv_heads: int) -> list[list[list[int]]]:
    """Per row and key/value head (``kv_heads`` = 1: one set for the layer), the prompt positions SnapKV keeps, as
    kvpress's SnapKVPress scores them, from an eager one-layer model's attention written out as loops: each query
    head's mean attention from the window's queries to each earlier token, average-pooled over the earlier tokens
    only (missing neighbours counted as 0), averaged over the query heads that read the key/value head."""
    with torch.no_grad():
        weights = plain(ids, output_attentions=True).attentions[0]  # [B, H, T, T], causal
    B, H, T, _ = weights.shape
    earlier, half, group = T - window, kernel // 2, H // kv_heads
    kept = []
    for b in range(B):
        row = []
        for g in range(kv_heads):
            score = []
            for j in range(earlier):
                pooled_per_head = []
                for h in range(g * group, (g + 1) * group):
                    observed = [sum(float(weights[b, h, q, i]) for q in range(earlier, T)) / window
                                for i in range(earlier)]
                    pooled_per_head.append(sum(observed[i] for i in range(j - half, j + half + 1)
                                               if 0 <= i < earlier) / kernel)
                score.append(sum(pooled_per_head) / group)
            heavy = sorted(range(earlier), key=lambda j: -score[j])[:budget - window]
            row.append(sorted(heavy) + list(range(earlier, T)))
        kept.append(row)
    return kept


def snapkv_per_head_mask(kept: list[list[list[int]]], heads: int, length: int) -> torch.Tensor:
    """[B, H, length, length] additive: the prompt attends causally; each later query sees what its key/value
    head kept of the prompt and every token after it."""
    B, kv_heads, prompt_length = len(kept), len(kept[0]), kept[0][0][-1] + 1
    mask = torch.full((B, heads, length, length), -math.inf)
    for b in range(B):
        for h in range(heads):
            for t in range(length):
                for j in range(t + 1):
                    held = j in kept[b][h // (heads // kv_heads)] or j >= prompt_length
                    if t < prompt_length or held:
                        mask[b, h, t, j] = 0.0
    return mask


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("per_head", [True, False])
def test_snapkv_compresses_the_prompt_as_a_reference_loop_and_then_keeps_every_token(arch, per_head):
    model = enable_eviction(hf_model(arch, layers=1))
    plain = hf_model(arch, layers=1, attn_implementation="eager")
    kv_heads = (4 if arch == "gpt2" else 2) if per_head else 1
    ids = prompt(length=16, seed=4)
    cache = EvictingCache(SnapKV(7, window=3, kernel=3, per_head=per_head))
    with torch.no_grad():
        model(ids, past_key_values=cache)
        kept = reference_snapkv(plain, ids, budget=7, window=3, kernel=3, kv_heads=kv_heads)
        assert [[kept_positions(cache.layers[0], b, g) for g in range(kv_heads)] for b in range(2)] == kept
        assert kept[0] != kept[1] and kept[0][0][:4] != [0, 1, 2, 3]  # rows select different, not just first, tokens
        if per_head:  # the heads select differently, so one set per layer would not be what kvpress keeps
            assert all(len({tuple(head) for head in row}) > 1 for row in kept)
            assert [row[0] for row in kept] != [row[0] for row in
                                                reference_snapkv(plain, ids, 7, 3, 3, kv_heads=1)]
        following = prompt(length=2, seed=5)[:, :1]
        logits = model(following, past_key_values=cache).logits[:, -1]
        heads = plain.config.num_attention_heads
        # the next token attends, in each head, to what its key/value head kept: a full forward under that mask
        expected = plain(torch.cat([ids, following], dim=1),
                         attention_mask=snapkv_per_head_mask(kept, heads, 17)).logits[:, -1]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert [[kept_positions(cache.layers[0], b, g) for g in range(kv_heads)] for b in range(2)] == \
        [[head + [16] for head in row] for row in kept]
    assert cache.layers[0].live_tokens().tolist() == [8, 8]
    assert cache.policy.describe() == f"SnapKV(budget=7, window=3, kernel=3, {'per_head' if per_head else 'per_layer'})"


def test_beam_search_reorders_the_evicting_cache():
    """Beam search reorders rows (``reorder_cache``): with everything kept it equals beam search without a cache;
    with a small budget every beam's cache still holds the budget."""
    model = enable_eviction(hf_model("llama"))
    ids = prompt()
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, num_beams=3,
                    pad_token_id=0)
    expected = hf_model("llama").generate(ids, use_cache=False, **settings)
    assert torch.equal(model.generate(ids, past_key_values=EvictingCache(TOVA(16)), **settings), expected)
    cache = EvictingCache(TOVA(5))
    model.generate(ids, past_key_values=cache, **settings)
    assert (cache.live_tokens() == 5).all() and cache.live_tokens().shape == (2, 6)


# ---------------------------------------------------------------------- (d) memory, (e) batches


@pytest.mark.parametrize("policy", ["streaming", "tova", "h2o", "snapkv"])
def test_cache_bytes_are_kept_tokens_times_bytes_per_token(policy):
    model = enable_eviction(hf_model("llama"))
    ids = prompt(batch=1, length=20)
    cache = EvictingCache(POLICIES[policy](7))
    with torch.no_grad():
        model(ids, past_key_values=cache)
    heads, head_dim = 2, 8
    # keys and values (float32), position (int64) and validity (bool) per layer, or per key/value head for SnapKV,
    # and H2O's accumulated attention (float32)
    sets = heads if policy == "snapkv" else 1
    per_token = 2 * heads * head_dim * 4 + (8 + 1) * sets + (4 if policy == "h2o" else 0)
    for layer in cache.layers:
        assert layer.live_tokens().tolist() == [7] and layer.keys.shape[2] == 7
        assert layer.nbytes() == 7 * per_token
    dense = DynamicCache()
    with torch.no_grad():
        hf_model("llama")(ids, past_key_values=dense)
    kv = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert kv / sum(layer.keys.nbytes + layer.values.nbytes for layer in dense.layers) == pytest.approx(7 / 20)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("policy", ["streaming", "tova"])
def test_batch_rows_evict_as_they_do_alone(arch, policy):
    model = enable_eviction(hf_model(arch))
    ids = prompt(batch=2, length=10, seed=1)
    cache = EvictingCache(POLICIES[policy](6))
    generated = generate(model, ids, 6, cache)
    for row in range(2):
        alone_cache = EvictingCache(POLICIES[policy](6))
        assert torch.equal(generated[row:row + 1], generate(model, ids[row:row + 1], 6, alone_cache))
        assert kept_positions(cache.layers[1], row) == kept_positions(alone_cache.layers[1], 0)
    # a left-padded shorter prompt continues as it does alone: padding is never kept and never counts
    short = prompt(batch=1, length=6, seed=2)
    padded = torch.cat([torch.cat([torch.zeros(1, 4, dtype=torch.long), short], dim=1), ids[:1]])
    mask = (torch.arange(10)[None, :] >= torch.tensor([[4], [0]])).long()
    cache = EvictingCache(POLICIES[policy](6))
    batched = generate(model, padded, 5, cache, attention_mask=mask)
    alone_cache = EvictingCache(POLICIES[policy](6))
    assert torch.equal(batched[0, 4:], generate(model, short, 5, alone_cache)[0])
    shift = [p - 4 for p in kept_positions(cache.layers[0], 0)]
    assert shift == kept_positions(alone_cache.layers[0], 0)


# ---------------------------------------------------------------------- (f) errors


@pytest.mark.parametrize("make, match", [
    (lambda: TOVA(0), "budget in tokens must be >= 1"),
    (lambda: H2O(-3), "budget in tokens must be >= 1"),
    (lambda: TOVA(1.5), r"fraction .* must lie in \(0, 1\]"),
    (lambda: TOVA(0.0), r"fraction .* must lie in \(0, 1\]"),
    (lambda: TOVA(True), "budget must be a number of tokens"),
    (lambda: TOVA("8"), "budget must be a number of tokens"),
    (lambda: StreamingLLM(4, sinks=4), "no recent window"),
    (lambda: StreamingLLM(8, sinks=-1), "sinks must be an int >= 0"),
    (lambda: H2O(8, recent=1.5), r"recent .* must lie in \[0, 1\]"),
    (lambda: SnapKV(8, window=8), "budget > window"),
    (lambda: SnapKV(8, window=0), "window .* must be an int >= 1"),
    (lambda: SnapKV(0.5, kernel=4), "kernel must be an odd int"),
    (lambda: EvictingCache("TOVA"), "needs an EvictionPolicy"),
])
def test_bad_budgets_and_policies_raise_clear_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_a_model_without_eviction_enabled_or_with_learned_pruning_or_an_unjudged_call_refuses():
    ids = prompt()
    with pytest.raises(RuntimeError, match="enable_eviction"), torch.no_grad():
        hf_model("gpt2")(ids, past_key_values=EvictingCache(TOVA(4)))
    with pytest.raises(ValueError, match="learned context pruning"):
        enable_eviction(attach(hf_model("gpt2"), PruningConfig(r=8)))
    # an attention path of a model's own that skips the attention functions leaves a call unjudged: the next says so
    cache = EvictingCache(TOVA(4))
    keys = torch.zeros(2, 2, 3, 8)
    cache._layer(0).armed = True  # what the pre-hook does
    cache.update(keys, keys, 0)  # ... and no attention function judges these 3 tokens
    cache.layers[0].armed = True
    with pytest.raises(RuntimeError, match="without the 'bab_eviction' attention"):
        cache.update(keys, keys, 0)


# ---------------------------------------------------------------------- evaluation for the notebooks


def test_evaluate_eviction_perplexity_and_fraction_pruned():
    model = hf_model("llama")
    stream = torch.randint(1, 97, (3 * 12 + 1,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():  # the dense reference: each window in one forward
        x, y = stream[:36].view(3, 12), stream[1:37].view(3, 12)
        logits = model(x).logits
        dense_ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), y.reshape(-1)).item()
    full = evaluate_eviction(model, stream, 12, TOVA(12), batch_size=2)
    assert model.config._attn_implementation == "sdpa"  # restored
    assert full["perplexity"] == pytest.approx(math.exp(dense_ce), rel=1e-5)
    assert full["fraction_pruned"] == 0.0 and full["windows"] == 3 and full["window_tokens"] == [12] * 3
    assert math.exp(sum(full["window_nll"]) / 36) == pytest.approx(full["perplexity"], rel=1e-9)
    chunked = evaluate_eviction(model, stream, 12, StreamingLLM(12), chunk=5)
    assert chunked["perplexity"] == pytest.approx(full["perplexity"], rel=1e-5)
    assert chunked["unit_ids"] == full["unit_ids"]

    # token by token with 4 kept: query t sees min(t, 4) of its t earlier tokens, in every layer and window
    pruned = evaluate_eviction(model, stream, 12, StreamingLLM(4, sinks=1))
    kept = sum(min(t, 4) for t in range(12)) / sum(range(12))
    assert pruned["fraction_pruned"] == pytest.approx(1 - kept) and pairs_kept(12, 4) == pytest.approx(kept)
    assert pruned["perplexity"] != pytest.approx(full["perplexity"], rel=1e-3)
    assert pruned["policy"] == "StreamingLLM(budget=4, sinks=1)"
    assert budget_for_fraction(12, kept) == 4 and budget_for_fraction(12, kept + 1e-3) == 5
    assert budget_for_fraction(12, 1.0) == 11

    # SnapKV evicts from a prompt only: 8 tokens in one call, cut to 5, then 4 tokens one by one seeing 5, 6, 7, 8
    snap = evaluate_eviction(model, stream, 12, SnapKV(5, window=2, kernel=3), prefill=8)
    assert snap["fraction_pruned"] == pytest.approx(1 - (sum(range(8)) + 5 + 6 + 7 + 8) / sum(range(12)))
    assert evaluate_eviction(model, stream, 12, SnapKV(5, window=2))["fraction_pruned"] == 0.0  # one by one
    with pytest.raises(ValueError, match="prefill"):
        evaluate_eviction(model, stream, 12, TOVA(4), prefill=13)
