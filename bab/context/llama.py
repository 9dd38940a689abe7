"""Llama-family decoders (SmolLM2, Llama, ...: RoPE, grouped-query attention, RMSNorm, SwiGLU) with optional
dynamic context pruning.

Parameter names follow transformers' ``LlamaForCausalLM`` exactly (``model.layers.0.self_attn.q_proj.weight``
...), so a Hugging Face state dict loads as is and, with pruning off, the logits equal transformers'
(tests/context/test_llama.py; the packaged SmolLM2-135M in a slow test). The layer loop, the pruned
attention, the KV cache and the cached generation are shared with GPT-2 (bab.context.decoder).

With grouped-query attention the cache keeps G key/value heads (SmolLM2: 3), not H query heads (9);
keys are cached after RoPE, so a token keeps its original position after others are dropped.

Shapes: B batch, T sequence, d = hidden_size, H query heads, G key/value heads, Dh = head_dim, F the
SwiGLU width (intermediate_size), V vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bab.context.decoder import ContextDecoder, DecoderBlock, PrunedAttention, load_checked
from bab.context.interaction import ContextInteraction, PruningConfig


@dataclass(frozen=True)
class LlamaDecoderConfig:
    """The transformers.LlamaConfig fields we use (same names), plus the pruning settings."""

    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_hidden_layers: int = 30
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    max_position_embeddings: int = 8192
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_dropout: float = 0.0
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    pruning: PruningConfig | None = None  # None: the plain decoder

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if min(self.vocab_size, self.hidden_size, self.num_hidden_layers, self.max_position_embeddings) < 1:
            raise ValueError("vocab_size, hidden_size, num_hidden_layers and max_position_embeddings must be >= 1")

    @classmethod
    def from_hf(cls, hf_config, pruning: PruningConfig | None = None) -> LlamaDecoderConfig:
        """From a transformers.LlamaConfig; refuses the options whose behaviour we do not implement."""
        if getattr(hf_config, "model_type", "llama") != "llama":
            raise ValueError(f"expected a Llama-family config (model_type 'llama'), got {hf_config.model_type!r}")
        if getattr(hf_config, "hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {hf_config.hidden_act!r} is not supported (SwiGLU needs 'silu')")
        if getattr(hf_config, "pretraining_tp", 1) not in (None, 1):
            raise ValueError("pretraining_tp > 1 is not supported")
        rope = getattr(hf_config, "rope_parameters", None) or {}  # transformers >= 5
        rope_type = rope.get("rope_type", "default")
        legacy_scaling = getattr(hf_config, "rope_scaling", None)  # transformers 4
        if rope_type != "default" or (legacy_scaling and legacy_scaling.get("rope_type", "default") != "default"):
            raise ValueError(f"RoPE scaling {rope_type if rope_type != 'default' else legacy_scaling!r} is not "
                             "supported; only the default RoPE (rope_type 'default') is implemented")
        theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
        return cls(vocab_size=hf_config.vocab_size, hidden_size=hf_config.hidden_size,
                   intermediate_size=hf_config.intermediate_size, num_hidden_layers=hf_config.num_hidden_layers,
                   num_attention_heads=heads, num_key_value_heads=hf_config.num_key_value_heads or heads,
                   head_dim=head_dim, max_position_embeddings=hf_config.max_position_embeddings,
                   rms_norm_eps=float(hf_config.rms_norm_eps), rope_theta=float(theta),
                   attention_bias=bool(getattr(hf_config, "attention_bias", False)),
                   mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
                   attention_dropout=float(getattr(hf_config, "attention_dropout", 0.0)),
                   tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
                   initializer_range=float(getattr(hf_config, "initializer_range", 0.02)), pruning=pruning)

    def to_hf(self):
        from transformers import LlamaConfig

        fields = {k: v for k, v in asdict(self).items() if k not in ("pruning", "rope_theta")}
        return LlamaConfig(**fields, rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta})

    def to_dict(self) -> dict:
        """Every field, the pruning config's as its own ``to_dict`` gives them (the run-cache key hashes this)."""
        fields = asdict(self)
        if self.pruning is not None:
            fields["pruning"] = self.pruning.to_dict()
        return fields


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[..., Dh] -> [-x2, x1] (the halves swapped, the second negated): RoPE's rotation by 90 degrees."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """The default RoPE: frequency i = theta^(-2i / Dh); cos/sin duplicated over the two halves of a head."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # not in the state dict (as in transformers)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x [B, heads, T, Dh] at positions start..start+T-1 -> rotated x (same shape)."""
        positions = torch.arange(start, start + x.shape[2], device=x.device, dtype=torch.float)
        freqs = positions[:, None] * self.inv_freq[None, :]  # [T, Dh / 2], computed in float32
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin


class Attention(PrunedAttention):
    def __init__(self, config: LlamaDecoderConfig):
        super().__init__()
        d, Dh = config.hidden_size, config.head_dim
        self.n_head, self.n_kv_head, self.head_dim = config.num_attention_heads, config.num_key_value_heads, Dh
        self.q_proj = nn.Linear(d, self.n_head * Dh, bias=config.attention_bias)
        self.k_proj = nn.Linear(d, self.n_kv_head * Dh, bias=config.attention_bias)
        self.v_proj = nn.Linear(d, self.n_kv_head * Dh, bias=config.attention_bias)
        self.o_proj = nn.Linear(self.n_head * Dh, d, bias=config.attention_bias)
        self.rotary = Rotary(Dh, config.rope_theta)
        self.attn_dropout = config.attention_dropout
        self.interaction = None if config.pruning is None else ContextInteraction(d, config.pruning)

    def qkv(self, x, start: int = 0):
        """x [B, T, d] -> q [B, H, T, Dh], k, v [B, G, T, Dh]; q and k rotated for positions start.."""
        B, T, _ = x.shape

        def heads(t, n):
            return t.view(B, T, n, self.head_dim).transpose(1, 2)

        q = self.rotary(heads(self.q_proj(x), self.n_head), start)
        k = self.rotary(heads(self.k_proj(x), self.n_kv_head), start)
        return q, k, heads(self.v_proj(x), self.n_kv_head)

    def merge(self, y):
        """y [B, H, T, Dh] -> [B, T, d], output projection."""
        B, _, T, _ = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaDecoderConfig):
        super().__init__()
        d, f, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(d, f, bias=bias)
        self.up_proj = nn.Linear(d, f, bias=bias)
        self.down_proj = nn.Linear(f, d, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(DecoderBlock):
    def __init__(self, config: LlamaDecoderConfig):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = MLP(config)

    @property
    def attention(self) -> Attention:
        return self.self_attn

    def attn_input(self, x):
        return self.input_layernorm(x)

    def feed_forward(self, x):
        return self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """transformers' ``LlamaModel`` layout: ``embed_tokens``, ``layers``, ``norm``."""

    def __init__(self, config: LlamaDecoderConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


class LlamaLM(ContextDecoder):
    def __init__(self, config: LlamaDecoderConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        # Tied embeddings use embed_tokens.weight directly (no second module sharing it), so the state dict
        # holds each tensor once, as safetensors (the run cache) requires; an untied head is its own Linear.
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                         bias=False)
        for name, module in self.named_modules():
            # the interactions initialise themselves (small weights, bias init_bias), so fine-tuning starts near dense
            if ".interaction" not in name and isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=config.initializer_range)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    @property
    def max_positions(self) -> int:
        return self.config.max_position_embeddings

    @property
    def kv_shape(self) -> tuple[int, int]:
        return self.config.num_key_value_heads, self.config.head_dim

    def embed(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        return self.model.embed_tokens(ids)  # positions enter through RoPE in the attention

    def head(self, h: torch.Tensor) -> torch.Tensor:
        h = self.model.norm(h)
        return F.linear(h, self.model.embed_tokens.weight) if self.lm_head is None else self.lm_head(h)


# ---------------------------------------------------------------------- Hugging Face interoperability


def load_hf_state_dict(model: LlamaLM, state_dict: dict) -> LlamaLM:
    """Load a transformers LlamaForCausalLM state dict; the interaction parameters keep their init."""
    state = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
    if model.config.tie_word_embeddings:
        head = state.pop("lm_head.weight", None)
        if head is not None and not torch.equal(head, state["model.embed_tokens.weight"]):
            raise ValueError("lm_head.weight differs from model.embed_tokens.weight although the config says "
                             "tie_word_embeddings=True; build the config with tie_word_embeddings=False")
    return load_checked(model, state, "Llama decoder")


def from_hf_model(hf_model, pruning: PruningConfig | None = None) -> LlamaLM:
    """Our LlamaLM (float32) with the weights of a transformers LlamaForCausalLM."""
    config = LlamaDecoderConfig.from_hf(hf_model.config, pruning=pruning)
    return load_hf_state_dict(LlamaLM(config), {k: v.float() for k, v in hf_model.state_dict().items()})
