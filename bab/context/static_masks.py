"""Static sparse attention baselines at equal sparsity (the Dynamic Context Pruning paper's comparisons).

Two fixed patterns, as bool masks [T, T] (True: query k may attend key j) for the ``attn_mask`` argument of
any ``ContextDecoder.forward`` (GPT-2 or Llama), which AND-s them with the causal mask:

- local window w: k sees the last w tokens, itself included (k - w < j <= k);
- strided (Child et al. 2019, both of its heads' patterns in one mask, as every head here shares one
  mask): k sees the last ``stride`` tokens and every stride-th token before them ((k - j) mod stride = 0).

The sparsity of a mask is measured as the paper measures context pruning (bab.context.evaluate):
the fraction of strictly causal pairs k > j that are masked out. ``match_window`` / ``match_stride``
pick the w / stride whose pattern prunes closest to a requested fraction at a given length, so the
baselines sit at the same fraction of context pruned as a fine-tuned pruning model.

Shapes: T sequence length; masks [T, T] bool.
"""

from __future__ import annotations

import torch

KINDS = ("local", "strided")


def _check_length(T: int) -> None:
    if T < 2:
        raise ValueError(f"a static mask needs a sequence of at least 2 tokens (pairs k > j), got T={T}")


def _distances(T: int) -> torch.Tensor:
    """[T, T] long: k - j (negative above the diagonal)."""
    positions = torch.arange(T)
    return positions[:, None] - positions[None, :]


def local_window_mask(T: int, window: int) -> torch.Tensor:
    """[T, T] bool: k may attend j iff 0 <= k - j < window (the last ``window`` tokens, k itself included)."""
    _check_length(T)
    if window < 1:
        raise ValueError(f"window must be >= 1 (a token always sees itself), got {window}")
    d = _distances(T)
    return (d >= 0) & (d < window)


def strided_mask(T: int, stride: int) -> torch.Tensor:
    """[T, T] bool: k may attend j iff 0 <= k - j < stride or (k - j) is a multiple of ``stride``."""
    _check_length(T)
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    d = _distances(T)
    return (d >= 0) & ((d < stride) | (d % stride == 0))


def pruned_fraction(mask: torch.Tensor) -> float:
    """Fraction of the strictly causal pairs k > j that ``mask`` [T, T] (or [..., T, T]) masks out."""
    T = mask.shape[-1]
    _check_length(T)
    below = torch.ones(T, T, dtype=torch.bool).tril(-1)
    return 1.0 - mask[..., below].float().mean().item()


def _pattern_fraction(T: int, kept_distance) -> float:
    """Pruned fraction of a pattern that keeps pair (k, j) iff ``kept_distance(k - j)``; there are T - d pairs at
    distance d, so this is O(T) instead of building the T x T mask."""
    d = torch.arange(1, T)
    pairs = (T - d).double()
    return 1.0 - (pairs * kept_distance(d)).sum().item() / pairs.sum().item()


def _closest(T: int, fraction: float, kept_distance_for) -> int:
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction of context pruned must lie in [0, 1), got {fraction}")
    _check_length(T)
    candidates = range(1, T + 1)
    errors = [abs(_pattern_fraction(T, kept_distance_for(c)) - fraction) for c in candidates]
    return candidates[min(range(len(errors)), key=errors.__getitem__)]  # ties: the smaller (sparser) pattern


def match_window(T: int, fraction: float) -> int:
    """The window w whose local pattern prunes closest to ``fraction`` of the pairs k > j at length T."""
    return _closest(T, fraction, lambda w: lambda d: (d < w).double())


def match_stride(T: int, fraction: float) -> int:
    """The stride whose strided pattern prunes closest to ``fraction`` of the pairs k > j at length T."""
    return _closest(T, fraction, lambda s: lambda d: ((d < s) | (d % s == 0)).double())


def _is_local(kind: str) -> bool:
    if kind not in KINDS:
        raise ValueError(f"static mask kind must be one of {KINDS}, got {kind!r}")
    return kind == "local"


def matched_size(kind: str, T: int, fraction: float) -> int:
    """The window (``kind`` 'local') or stride ('strided') whose pattern prunes closest to ``fraction`` at length T."""
    return (match_window if _is_local(kind) else match_stride)(T, fraction)


def pattern_mask(kind: str, T: int, size: int) -> torch.Tensor:
    """The ``kind`` mask [T, T] of window or stride ``size``: with the kind, the size names the mask at a length (what
    a run or a measurement is keyed by)."""
    return (local_window_mask if _is_local(kind) else strided_mask)(T, size)


def static_mask(kind: str, T: int, fraction: float) -> torch.Tensor:
    """The ``kind`` ('local' or 'strided') mask [T, T] matched to prune ``fraction`` of the context at length T."""
    return pattern_mask(kind, T, matched_size(kind, T, fraction))
