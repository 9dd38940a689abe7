"""A small word-level transformer encoder for classification with budgeted head gates.

Multi-head attention runs in one of four ways (``mode``):

- ``"dense"``: every head, no gates (the baseline and the warm-start source).
- ``"soft"``:  every head, each head's output scaled by its soft gate g_lh(b) (Eq. 2).
- ``"hard"``:  every head computed, then multiplied by a binary top-k mask (straight-through
  to the soft gates while training). Costs as much as dense; used for training and for checks.
- ``"skip"``:  only the active heads are computed: Q, K, V, attention and the output-projection
  columns of the kept heads. This is where measured speed comes from. Inference only. Outside
  autograd the kept heads' weights are sliced once per head set and cached (``KeptHeadWeights``),
  so every later call runs dense-shaped, smaller matrix products and copies no weight.

Shapes: B batch, T tokens, D model width, H heads, Dh = D / H head width, L layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bab.heads.gates import attention_cost, head_weights, make_gates, scale_heads, topk_head_mask

MODES = ("dense", "soft", "hard", "skip")
GATE_KINDS = (None, "budget", "static")
POSITIONS = ("relative", "sinusoidal", "learned")
REL_BIAS_SCALE = 10.0
KEPT_CACHE_SIZE = 32  # head sets whose sliced weights each attention layer keeps (a budget sweep uses a few)


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int
    num_classes: int
    max_len: int
    d_model: int = 64
    num_heads: int = 8
    num_layers: int = 2
    d_ff: int = 128
    dropout: float = 0.0
    pad_id: int = 0
    # "relative": fixed sinusoidal positions plus a learned attention bias per head and offset;
    # "sinusoidal" (fixed) or "learned" absolute position embeddings alone
    positions: str = "relative"
    gates: str | None = None  # None (dense only), "budget" (Eq. 1) or "static"
    gate_temperature: float = 1.0
    gate_init_logit: float = 0.0  # with unit sensitivity, C(b) = b at initialisation

    def __post_init__(self):
        for name in ("vocab_size", "num_classes", "max_len", "d_model", "num_heads", "num_layers", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"EncoderConfig.{name} must be a positive integer, got {value!r}")
        if self.num_classes < 2:
            raise ValueError(f"EncoderConfig.num_classes must be at least 2, got {self.num_classes}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"EncoderConfig.d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"EncoderConfig.dropout must lie in [0, 1), got {self.dropout}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"EncoderConfig.pad_id must lie in [0, vocab_size), got {self.pad_id}")
        if self.positions not in POSITIONS:
            raise ValueError(f"EncoderConfig.positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.gates not in GATE_KINDS:
            raise ValueError(f"EncoderConfig.gates must be one of {GATE_KINDS}, got {self.gates!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


@dataclass
class EncoderOutput:
    logits: torch.Tensor  # [B, num_classes]
    gates: torch.Tensor | None  # soft gates [L, H] (None in dense mode or with an explicit mask)
    head_mask: torch.Tensor | None  # what multiplied the heads [L, H] (None in dense mode)
    cost: torch.Tensor  # estimated attention cost: mean gate mass (soft) or kept fraction (hard)


def sinusoidal_positions(max_len: int, d_model: int) -> torch.Tensor:
    """[max_len, d_model] fixed encodings of Vaswani et al. (2017)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return table


def math_backend_attention(q, k, v, mask=None, dropout_p=0.0):
    """q, k, v [B, n, T, Dh]; mask [.., T, T] additive or boolean (True: attend). What SDPA computes on CPU when a
    step needs its math backend (dropout, or a mask with a gradient: the learned relative bias), op for op, so the
    outputs and gradients are bit-identical (tests/heads/test_encoder.py), less the backend's guard for rows that
    mask every key (isneginf, all, where: 16% of a training step of the synthetic model in torch's profiler). No
    row here masks every key: the [CLS] key is never padding."""
    scale = math.sqrt(1.0 / math.sqrt(q.shape[-1]))  # SDPA scales q and k by the root of 1 / sqrt(Dh) each
    scores = (q * scale) @ (k * scale).transpose(-2, -1)
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device).masked_fill(~mask, float("-inf"))
        scores = scores + mask
    probs = scores.softmax(-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs @ v


def sdpa(q, k, v, mask=None, dropout_p=0.0):
    """torch's own ``scaled_dot_product_attention``, with ``math_backend_attention``'s arguments."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class KeptHeadWeights(NamedTuple):
    """The weights of one layer's kept heads, contiguous: what ``mode="skip"`` multiplies by."""

    qkv_weight: torch.Tensor  # [3 * n * Dh, D]: the kept rows of Q, then of K, then of V
    qkv_bias: torch.Tensor  # [3 * n * Dh]
    out_weight: torch.Tensor  # [D, n * Dh]: the kept columns of the output projection
    rel_bias: torch.Tensor | None  # [n, 2 * max_len - 1], or None without relative positions


class MultiHeadSelfAttention(nn.Module):
    # what a step that needs SDPA's math backend runs: ``math_backend_attention``, or ``sdpa`` (a benchmark's
    # reference; the two train the same weights bit for bit)
    math_attention = staticmethod(math_backend_attention)

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.dropout = config.dropout
        self.max_len = config.max_len
        if config.positions == "relative":
            # one learned bias per head and key-minus-query offset (as in T5, without buckets),
            # stored divided by REL_BIAS_SCALE: Adam moves a raw parameter ~lr per step, far too
            # slowly for a logit that must reach ~5 before a head can lock onto one offset
            self.rel_bias = nn.Parameter(torch.zeros(config.num_heads, 2 * config.max_len - 1))
        else:
            self.rel_bias = None
        self._kept_cache: dict[tuple[int, ...], tuple[tuple, KeptHeadWeights]] = {}

    def forward(self, x, key_padding_mask=None, head_weights=None, skip=False):
        """x [B, T, D]; key_padding_mask [B, T] True where padded; head_weights [H] or None."""
        if skip:
            return self._forward_skip(x, key_padding_mask, head_weights)
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        heads = self._attend(q, k, v, key_padding_mask, self.rel_bias)  # [B, H, T, Dh]
        if head_weights is not None:
            heads = scale_heads(heads, head_weights, head_axis=1)
        return self.out(heads.transpose(1, 2).reshape(B, T, D))

    def _forward_skip(self, x, key_padding_mask, head_mask):
        """Compute only the heads where ``head_mask`` is non-zero (the mask is treated as binary)."""
        B, T, D = x.shape
        kept_heads = tuple(h for h, weight in enumerate(head_mask.tolist()) if weight)  # one conversion, no op
        n = len(kept_heads)
        if n == 0:  # a global top-k may empty a layer: the sublayer then adds only its bias
            return x.new_zeros(B, T, D) + self.out.bias
        kept = self.kept_weights(kept_heads)
        q, k, v = F.linear(x, kept.qkv_weight, kept.qkv_bias).view(B, T, 3, n, self.head_dim).permute(2, 0, 3, 1, 4)
        heads = self._attend(q, k, v, key_padding_mask, kept.rel_bias)  # [B, n, T, Dh]
        return F.linear(heads.transpose(1, 2).reshape(B, T, n * self.head_dim), kept.out_weight, self.out.bias)

    def kept_weights(self, heads) -> KeptHeadWeights:
        """The weights of ``heads`` (sorted head indices), sliced once per head set outside autograd.

        Slicing copies every kept weight, a sizeable share of a batch-1 pass, so when no gradient
        can flow the slices are cached; an entry is rebuilt when a weight changes (optimizer step,
        ``load_state_dict``: its version counter moves) or moves (``.to``: its storage changes).
        """
        heads = tuple(int(h) for h in heads)
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self._slice_kept(heads)  # training through skip mode: slices must carry gradients
        stamp = self._weights_stamp()
        hit = self._kept_cache.get(heads)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        with torch.no_grad():
            kept = self._slice_kept(heads)
        if heads not in self._kept_cache and len(self._kept_cache) >= KEPT_CACHE_SIZE:
            self._kept_cache.pop(next(iter(self._kept_cache)))  # forget the oldest head set
        self._kept_cache[heads] = (stamp, kept)
        return kept

    def _weights_stamp(self) -> tuple:
        """What identifies the current weights: storage, version, dtype and device of each parameter."""
        return (torch.is_inference_mode_enabled(),) + tuple(
            (p.data_ptr(), p._version, p.dtype, p.device) for p in self.parameters())

    def _slice_kept(self, heads: tuple[int, ...]) -> KeptHeadWeights:
        D, device = self.out.weight.shape[0], self.out.weight.device
        active = torch.tensor(heads, device=device)
        # rows of the fused qkv weight that belong to the active heads, for q, k and v
        cols = (active[:, None] * self.head_dim + torch.arange(self.head_dim, device=device)).flatten()
        rows = torch.cat([cols, cols + D, cols + 2 * D])
        return KeptHeadWeights(
            qkv_weight=self.qkv.weight[rows].contiguous(),
            qkv_bias=self.qkv.bias[rows].contiguous(),
            out_weight=self.out.weight[:, cols].contiguous(),
            rel_bias=None if self.rel_bias is None else self.rel_bias[active].contiguous(),
        )

    def _attend(self, q, k, v, key_padding_mask, rel_bias=None):
        """q, k, v [B, n, T, Dh]; rel_bias [n, 2 * max_len - 1] or None."""
        T = q.shape[-2]
        mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
        if rel_bias is not None:
            pos = torch.arange(T, device=q.device)
            offsets = pos[None, :] - pos[:, None] + self.max_len - 1  # [T, T]: key minus query offset
            bias = REL_BIAS_SCALE * rel_bias[:, offsets][None]  # [1, n, T, T]
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        p = self.dropout if self.training else 0.0
        if torch.is_grad_enabled() and (p > 0 or (mask is not None and mask.requires_grad)):
            return self.math_attention(q, k, v, mask, p)
        return sdpa(q, k, v, mask, p)


class EncoderLayer(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, key_padding_mask=None, head_weights=None, skip=False):
        x = x + self.drop(self.attn(self.ln1(x), key_padding_mask, head_weights, skip))
        return x + self.drop(self.mlp(self.ln2(x)))


class EncoderClassifier(nn.Module):
    """Token + position embeddings, L pre-LN blocks, classification from the first token ([CLS])."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        if config.positions == "learned":
            self.pos_emb = nn.Parameter(0.02 * torch.randn(config.max_len, config.d_model))
        else:
            # fixed sinusoids: "attend to the next token" is one linear map for every position,
            # which the marked-token task needs and learns far faster than with learned positions
            self.register_buffer("pos_emb", sinusoidal_positions(config.max_len, config.d_model), persistent=False)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.num_classes)
        self.gates = make_gates(config.gates, config.num_layers, config.num_heads, config.gate_temperature,
                                config.gate_init_logit)
        # hard and skip mode's per-layer floor: 0 is the paper's global top-k (Eq. 4), which may empty a layer.
        # Set by hard adaptation with TrainConfig.adaptation.min_per_layer; not in the config, since it changes no
        # weight.
        self.min_per_layer = 0

    def head_mask_for(self, budget: float, min_per_layer: int | None = None) -> torch.Tensor:
        """The binary [L, H] mask of hard mode at ``budget`` (``min_per_layer`` >= 1: with the floor;
        None: the model's own ``self.min_per_layer``, what its hard and skip modes use)."""
        floor = self.min_per_layer if min_per_layer is None else min_per_layer
        return topk_head_mask(self.gates, budget, floor)

    def forward(
        self,
        input_ids: torch.Tensor,
        budget: float | None = None,
        mode: str = "dense",
        head_mask: torch.Tensor | None = None,
        trim_padding: bool = True,
    ) -> EncoderOutput:
        """input_ids [B, T]. ``head_mask`` [L, H] (binary) replaces the gates' top-k in hard/skip mode.

        ``trim_padding`` drops the trailing columns that are padding in every row before the first layer. Padded
        keys are masked and only the first token is classified, so the logits are those of the full-width
        batch (to float rounding), at the cost of the batch's longest text instead of ``T``. Off: every batch
        runs at its full width, as a latency protocol at a fixed length needs.
        """
        B, T = input_ids.shape
        if T > self.config.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len {self.config.max_len}; truncate the input")
        weights, gates = self._head_weights(budget, mode, head_mask)
        key_padding_mask = input_ids.eq(self.config.pad_id)
        if trim_padding:
            used = (~key_padding_mask).any(0).nonzero()  # columns where some row has a real token
            T = int(used[-1]) + 1 if len(used) else 1
            input_ids, key_padding_mask = input_ids[:, :T], key_padding_mask[:, :T]
        if not key_padding_mask.any():
            key_padding_mask = None  # lets SDPA take its fastest kernel
        x = self.tok_emb(input_ids) + self.pos_emb[:T]
        for layer_idx, layer in enumerate(self.layers):
            layer_weights = None if weights is None else weights[layer_idx]
            x = layer(x, key_padding_mask, layer_weights, skip=(mode == "skip"))
        logits = self.head(self.ln_f(x[:, 0]))
        cost = attention_cost(weights, mode, logits.device)
        return EncoderOutput(logits=logits, gates=gates, head_mask=weights, cost=cost)

    def _head_weights(self, budget, mode, head_mask):
        """Returns (weights that multiply the heads [L, H] or None, soft gates [L, H] or None)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        shape = (self.config.num_layers, self.config.num_heads)
        return head_weights(self.gates, budget, mode, head_mask, shape, self.head.weight.dtype, self.min_per_layer)
