"""GPT-2 (the Hugging Face ``GPT2LMHeadModel`` layout) with optional dynamic context pruning.

Parameter names follow transformers' GPT-2 exactly (``transformer.h.0.attn.c_attn.weight`` ...,
Conv1D weights stored [in, out]), so a Hugging Face state dict loads as is and, with pruning
off, the logits equal transformers' (tests/context/test_gpt2.py). With pruning on, every attention layer
owns a ``ContextInteraction`` (bab.context.interaction) whose log I is added to the causal
attention logits.

Three ways to run it:

- ``forward(ids, alpha)``: the full sequence at once (training, perplexity); alpha = inf gives
  the hard decisions of inference.
- ``prefill(ids, cache)`` + ``decode_step(ids, cache)``: autoregressive generation with a
  ``KVCache`` from which dropped tokens are physically removed (bab.context.kv_cache).

The layer loop, the pruned attention and the cached paths are shared with the Llama family
(bab.context.decoder); this module holds what is GPT-2's own: Conv1D projections, learned
positions, LayerNorm, the GELU MLP.

Shapes: B batch, T sequence, d = n_embd, H heads, Dh = d / H, r interaction width, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bab.context.decoder import ContextDecoder, DecoderBlock, LMOutput, PrunedAttention, load_checked
from bab.context.interaction import ContextInteraction, PruningConfig

__all__ = ["GPT2Config", "GPT2LM", "LMOutput", "from_hf_model", "load_hf_state_dict", "load_pretrained"]

ACTIVATIONS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}


@dataclass(frozen=True)
class GPT2Config:
    """The GPT-2 fields we use (names as in transformers.GPT2Config), plus the pruning settings."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # None: 4 * n_embd
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    pruning: PruningConfig | None = None  # None: plain GPT-2

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"activation_function {self.activation_function!r} not supported; "
                             f"choose one of {sorted(ACTIVATIONS)}")
        if min(self.vocab_size, self.n_positions, self.n_layer) < 1:
            raise ValueError("vocab_size, n_positions and n_layer must be >= 1")

    @classmethod
    def from_hf(cls, hf_config, pruning: PruningConfig | None = None) -> GPT2Config:
        """From a transformers.GPT2Config; refuses the options whose behaviour we do not implement."""
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if getattr(hf_config, flag, False):
                raise ValueError(f"GPT-2 option {flag}=True is not supported")
        if not getattr(hf_config, "scale_attn_weights", True):
            raise ValueError("GPT-2 option scale_attn_weights=False is not supported")
        names = [f for f in cls.__dataclass_fields__ if f != "pruning"]
        return cls(**{name: getattr(hf_config, name) for name in names}, pruning=pruning)

    def to_hf(self):
        from transformers import GPT2Config as HFConfig

        fields = {k: v for k, v in asdict(self).items() if k != "pruning"}
        return HFConfig(**fields, bos_token_id=self.vocab_size - 1, eos_token_id=self.vocab_size - 1)

    def to_dict(self) -> dict:
        """Every field, the pruning config's as its own ``to_dict`` gives them (the run-cache key hashes this)."""
        fields = asdict(self)
        if self.pruning is not None:
            fields["pruning"] = self.pruning.to_dict()
        return fields


class Conv1D(nn.Module):
    """transformers' Conv1D: y = x @ W + b with W stored [in, out]."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(PrunedAttention):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.n_embd // config.n_head
        self.n_kv_head = self.n_head
        self.c_attn = Conv1D(config.n_embd, 3 * config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)
        self.attn_dropout = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.interaction = None if config.pruning is None else ContextInteraction(config.n_embd, config.pruning)

    def qkv(self, x, start: int = 0):
        """x [B, T, d] -> q, k, v [B, H, T, Dh] (positions are in the embedding, so ``start`` is unused)."""
        B, T, _ = x.shape
        q, k, v = self.c_attn(x).split(self.n_head * self.head_dim, dim=2)
        return [t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v)]

    def merge(self, y):
        """y [B, H, T, Dh] -> [B, T, d], output projection."""
        B, _, T, _ = y.shape
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, -1)))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        inner = config.n_inner or 4 * config.n_embd
        self.c_fc = Conv1D(config.n_embd, inner)
        self.c_proj = Conv1D(inner, config.n_embd)
        self.approximate = ACTIVATIONS[config.activation_function]
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate)))


class Block(DecoderBlock):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    @property
    def attention(self) -> Attention:
        return self.attn

    def attn_input(self, x):
        return self.ln_1(x)

    def feed_forward(self, x):
        return self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)


class GPT2LM(ContextDecoder):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config)
        # The output projection is the token embedding (GPT-2 ties them). We use wte.weight directly
        # instead of a second module sharing it, so the state dict holds each tensor once
        # (safetensors, used by the run cache, refuses shared tensors).
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=config.initializer_range / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, ContextInteraction):
            return  # initialised by itself
        if isinstance(module, Conv1D):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=self.config.initializer_range)

    def lm_head(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., d] -> logits [..., V] with the tied token embedding."""
        return F.linear(h, self.transformer.wte.weight)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.transformer.h

    @property
    def max_positions(self) -> int:
        return self.config.n_positions

    @property
    def kv_shape(self) -> tuple[int, int]:
        return self.config.n_head, self.config.n_embd // self.config.n_head

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer.ln_f(h))

    def embed(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        return self.transformer.drop(self.transformer.wte(ids) + self.transformer.wpe(positions))


# ---------------------------------------------------------------------- Hugging Face interoperability

# buffers that some transformers versions keep in GPT-2's state dict (causal mask constants)
_HF_BUFFERS = (".attn.bias", ".attn.masked_bias")


def load_hf_state_dict(model: GPT2LM, state_dict: dict) -> GPT2LM:
    """Load a transformers GPT2LMHeadModel state dict; the interaction parameters keep their init."""
    state = {k: v for k, v in state_dict.items() if not k.endswith(_HF_BUFFERS)}
    head = state.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, state["transformer.wte.weight"]):
        raise ValueError("lm_head.weight differs from transformer.wte.weight: only GPT-2 with tied input and "
                         "output embeddings (tie_word_embeddings=True, GPT-2's default) is supported")
    return load_checked(model, state, "GPT-2")


def from_hf_model(hf_model, pruning: PruningConfig | None = None) -> GPT2LM:
    """Our GPT2LM with the weights of a transformers GPT2LMHeadModel."""
    config = GPT2Config.from_hf(hf_model.config, pruning=pruning)
    return load_hf_state_dict(GPT2LM(config), hf_model.state_dict())


def load_pretrained(name: str = "gpt2", pruning: PruningConfig | None = None) -> GPT2LM:
    """Pretrained GPT-2 from the Hugging Face hub (needs network access or a local HF cache)."""
    from transformers import GPT2LMHeadModel

    try:
        hf_model = GPT2LMHeadModel.from_pretrained(name)
    except OSError as exc:
        raise FileNotFoundError(
            f"could not load pretrained {name!r} from the Hugging Face hub or its local cache ({exc}); "
            "offline, train a small GPT-2 from scratch (bab.experiments.context_pruning does)"
        ) from exc
    return from_hf_model(hf_model, pruning)
