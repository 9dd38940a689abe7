"""The eviction policies (bab.context.eviction) keep the token indices that NVIDIA kvpress's presses keep, each
press's formula written out here as loops over heads and positions on random attention weights (kvpress itself
cannot be installed beside this transformers: kvpress 0.5.5 needs transformers < 5.3).

kvpress compresses one prompt of k_len tokens, each key/value head keeping int(k_len * (1 - compression_ratio))
tokens (``ScorerPress.compress``: top-k of a score per key/value head); here that count is an int budget over a
single call's K slots, all real."""

import math

import pytest
import torch

from bab.context.eviction import H2O, TOVA, SlotView, SnapKV, StreamingLLM


def causal_weights(B: int, H: int, K: int, seed: int, peak: float = 3.0) -> torch.Tensor:
    """[B, H, K, K]: a prompt's causal attention probabilities from random logits."""
    logits = peak * torch.randn(B, H, K, K, generator=torch.Generator().manual_seed(seed))
    causal = torch.ones(K, K, dtype=torch.bool).tril()
    return torch.softmax(logits.masked_fill(~causal, -math.inf), dim=-1)


def prompt_view(weights: torch.Tensor, kv_heads: int | None = None) -> SlotView:
    """One call of a whole prompt: K real slots at positions 0 .. K-1, per layer or per ``kv_heads``."""
    B, _, _, K = weights.shape
    shape = (B, K) if kv_heads is None else (B, kv_heads, K)
    positions = torch.arange(K).expand(*shape)
    return SlotView(positions=positions, real=torch.ones(shape, dtype=torch.bool), seen=torch.full((B,), K),
                    weights=weights)


def kept_indices(keep: torch.Tensor) -> list:
    """Bool [..., K] -> nested lists of the kept indices."""
    if keep.dim() == 1:
        return torch.nonzero(keep).flatten().tolist()
    return [kept_indices(part) for part in keep]


def top(scores: list[float], count: int) -> list[int]:
    """The ``count`` highest-scoring indices, ascending (the test's weights have no ties)."""
    return sorted(sorted(range(len(scores)), key=lambda j: -scores[j])[:count])


# ---------------------------------------------------------------------- StreamingLLMPress


@pytest.mark.parametrize("K, n_kept, sinks", [(12, 6, 2), (20, 9, 4), (7, 5, 0)])
def test_streaming_llm_keeps_what_streaming_llm_press_keeps(K, n_kept, sinks):
    # kvpress: scores = 1, but 0 at the n_pruned = k_len - n_kept tokens right after the n_sink sinks; top n_kept
    n_pruned = K - n_kept
    scores = [0.0 if sinks <= j < sinks + n_pruned else 1.0 for j in range(K)]
    expected = [j for j in range(K) if scores[j] == 1.0]
    assert len(expected) == n_kept
    keep = StreamingLLM(n_kept, sinks=sinks).keep(prompt_view(causal_weights(1, 2, K, seed=0)))
    assert kept_indices(keep) == [expected]


# ---------------------------------------------------------------------- TOVAPress


def tova_press_keeps(weights: torch.Tensor, n_kept: int) -> list[list[int]]:
    """kvpress's TOVAPress: the last query's attention to each earlier key, mean over all query heads; the last
    token scored max + 1 (always kept); top n_kept (the same for every key/value head)."""
    B, H, _, K = weights.shape
    kept = []
    for b in range(B):
        scores = [sum(float(weights[b, h, -1, j]) for h in range(H)) / H for j in range(K - 1)]
        scores.append(max(scores) + 1)
        kept.append(top(scores, n_kept))
    return kept


@pytest.mark.parametrize("seed", range(4))
def test_tova_keeps_what_tova_press_keeps(seed):
    weights = causal_weights(3, 4, 15, seed=seed)
    keep = TOVA(6).keep(prompt_view(weights))
    assert kept_indices(keep) == tova_press_keeps(weights, 6)


def test_tova_keeps_the_last_token_even_when_its_own_attention_is_the_lowest():
    weights = causal_weights(2, 4, 10, seed=7)
    weights[:, :, -1, :] = torch.linspace(1.0, 0.1, 10)  # the last query looks away from itself ...
    weights[:, :, -1, :] /= weights[:, :, -1, :].sum(-1, keepdim=True)
    # ... so scoring every token by its weight would evict the last one
    assert 9 not in top(weights[0, :, -1, :].mean(0).tolist(), 4)
    keep = TOVA(4).keep(prompt_view(weights))
    assert kept_indices(keep) == tova_press_keeps(weights, 4) == [[0, 1, 2, 9]] * 2
    assert TOVA(4).describe() == "TOVA(budget=4, newest_kept=True)"


# ---------------------------------------------------------------------- SnapKVPress


def snapkv_press_keeps(weights: torch.Tensor, n_kept: int, window: int, kernel: int,
                       kv_heads: int) -> list[list[list[int]]]:
    """kvpress's SnapKVPress: for each query head, the window's queries' attention to each earlier key (softmax over
    all keys, then the earlier ones taken), mean over the window; avg_pool1d along the earlier keys (kernel,
    stride 1, padding kernel // 2, zeros counted); mean over the query heads of each key/value head group; the
    window scored max + 1; top n_kept per key/value head. Returns [B][kv_heads] kept indices."""
    B, H, _, K = weights.shape
    earlier, half, group = K - window, kernel // 2, H // kv_heads
    kept = []
    for b in range(B):
        per_head_pooled = []
        for h in range(H):
            observed = [sum(float(weights[b, h, q, j]) for q in range(earlier, K)) / window for j in range(earlier)]
            per_head_pooled.append([sum(observed[i] for i in range(j - half, j + half + 1) if 0 <= i < earlier)
                                    / kernel for j in range(earlier)])
        row = []
        for g in range(kv_heads):
            scores = [sum(per_head_pooled[h][j] for h in range(g * group, (g + 1) * group)) / group
                      for j in range(earlier)]
            scores += [max(scores) + 1] * window
            row.append(top(scores, n_kept))
        kept.append(row)
    return kept


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("heads, kv_heads", [(4, 1), (4, 2), (6, 3)])
def test_snapkv_keeps_what_snapkv_press_keeps_per_key_value_head(seed, heads, kv_heads):
    weights = causal_weights(2, heads, 24, seed=seed)
    keep = SnapKV(10, window=4, kernel=5).keep(prompt_view(weights, kv_heads))
    assert kept_indices(keep) == snapkv_press_keeps(weights, 10, window=4, kernel=5, kv_heads=kv_heads)


def test_snapkv_per_head_and_per_layer_differ_where_the_groups_look_at_different_tokens():
    # 2 key/value heads of 2 query heads each: group 0's window looks at token 3, group 1's (harder) at token 12
    K, window = 20, 4
    logits = torch.zeros(1, 4, K, K)
    logits[:, :2, K - window:, 3] = 3.0
    logits[:, 2:, K - window:, 12] = 4.0
    weights = torch.softmax(logits.masked_fill(~torch.ones(K, K, dtype=torch.bool).tril(), -math.inf), dim=-1)
    per_head = SnapKV(window + 1, window=window, kernel=1).keep(prompt_view(weights, kv_heads=2))
    expected = snapkv_press_keeps(weights, window + 1, window=window, kernel=1, kv_heads=2)
    assert kept_indices(per_head) == expected == [[[3, 16, 17, 18, 19], [12, 16, 17, 18, 19]]]
    # one set for the layer (mean over all four query heads) keeps group 1's token for both key/value heads
    per_layer = SnapKV(window + 1, window=window, kernel=1, per_head=False).keep(prompt_view(weights))
    assert kept_indices(per_layer) == snapkv_press_keeps(weights, window + 1, window, 1, kv_heads=1)[0]
    assert kept_indices(per_layer) == [[12, 16, 17, 18, 19]]
    assert SnapKV(5, window=4).describe() != SnapKV(5, window=4, per_head=False).describe()


def test_snapkv_pools_the_earlier_tokens_only_so_the_window_lends_no_weight():
    # the window's own keys hold nearly all the attention; a token next to the window must not borrow it
    K, window = 12, 3
    logits = torch.zeros(1, 2, K, K)
    logits[:, :, K - window:, K - window:] = 6.0  # the window attends to itself
    logits[:, :, K - window:, 2:5] = torch.tensor([1.0, 1.5, 1.0])  # ... and a little to tokens 2 to 4
    weights = torch.softmax(logits.masked_fill(~torch.ones(K, K, dtype=torch.bool).tril(), -math.inf), dim=-1)
    keep = SnapKV(window + 1, window=window, kernel=3).keep(prompt_view(weights, kv_heads=1))
    # pooled over every slot, token 8 would average in the window's token 9 and be kept instead of token 3
    assert kept_indices(keep) == snapkv_press_keeps(weights, window + 1, window, 3, kv_heads=1) == [[[3, 9, 10, 11]]]


# ---------------------------------------------------------------------- H2O (no kvpress press has its recent window)


@pytest.mark.parametrize("seed", range(3))
def test_h2o_keeps_the_recent_tokens_and_the_heaviest_accumulated_attention(seed):
    # the paper's rule: ceil(recent * n_kept) newest tokens, the rest by the attention received so far (mean over
    # heads, summed over queries)
    B, H, K, n_kept = 2, 4, 16, 7
    weights = causal_weights(B, H, K, seed=seed)
    mass = weights.mean(dim=1).sum(dim=1)  # [B, K]
    view = prompt_view(weights)
    view.mass = mass
    expected = []
    for b in range(B):
        recent = list(range(K - 4, K))  # ceil(0.5 * 7) = 4
        scores = [float(mass[b, j]) for j in range(K - 4)]
        expected.append(top(scores, n_kept - 4) + recent)
    assert kept_indices(H2O(n_kept, recent=0.5).keep(view)) == expected
