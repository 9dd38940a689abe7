"""Random tiny decoders of four transformers families, shared by the attached-pruning and the eviction tests (imported
by each test module: a conftest.py here would shadow the root one)."""

import pytest
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import logging as hf_logging

NO_SPECIAL = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)  # generation never stops early
LLAMA_LIKE = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                  num_hidden_layers=2, vocab_size=97, **NO_SPECIAL)


def architectures(n_positions: int) -> dict:
    """{family: (model class, config factory taking overrides)}; GPT-2 with ``n_positions`` positions."""
    return {
        "gpt2": (GPT2LMHeadModel, lambda **o: GPT2Config(**{**dict(n_layer=2, n_head=4, n_embd=32, vocab_size=97,
                                                                    n_positions=n_positions, **NO_SPECIAL), **o})),
        "llama": (LlamaForCausalLM, lambda **o: LlamaConfig(**{**LLAMA_LIKE, **o})),
        "qwen2": (Qwen2ForCausalLM, lambda **o: Qwen2Config(**{**LLAMA_LIKE, "use_sliding_window": False, **o})),
        "mistral": (MistralForCausalLM, lambda **o: MistralConfig(**{**LLAMA_LIKE, "sliding_window": None, **o})),
    }


@pytest.fixture(autouse=True, scope="module")
def quiet_transformers():
    """Tiny vocabularies and configs without special tokens make transformers warn at every model and generate."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity(level)


def unit_scale_(model):
    """Re-draw ``model``'s weights at unit-ish scale, in place (norms near 1, others ~ N(0, 1/fan_in)): peaked
    attention and clear argmax margins, so an error shows. Returns the model in eval mode."""
    import math

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name or "ln_" in name
                    else torch.randn_like(p) / math.sqrt(p.shape[-1]))
    return model.eval()


def tiny_gpt2(pruning=None, vocab_size: int = 50, n_positions: int = 32, n_embd: int = 16, n_layer: int = 2,
              n_head: int = 2, **overrides):
    """transformers' GPT-2 at a tiny size, with context pruning attached when ``pruning`` (a PruningConfig) is given;
    in eval mode, no dropout (unless ``overrides`` set the *_pdrop)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from bab.context.attach import attach

    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # overrides may turn it on
    config = GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        **{**no_dropout, **NO_SPECIAL, **overrides})
    model = GPT2LMHeadModel(config)
    return (attach(model, pruning) if pruning is not None else model).eval()


def random_tiny_configs(seed: int) -> dict:
    """{case: (model class, config)}: one random tiny config of every family the docs list as supported, drawn from
    the arguments their attention takes (GPT-2's scalings, grouped-query heads, head widths, attention biases, RoPE
    bases, Qwen2's and Mistral's sliding windows); every case eager-free, with transformers' default attention."""
    import random

    rng = random.Random(seed)
    window = rng.randint(3, 6)
    families = architectures(n_positions=64)
    heads = rng.choice([2, 4])
    llama_like = dict(num_attention_heads=4, num_key_value_heads=rng.choice([1, 2, 4]), head_dim=rng.choice([8, 16]),
                      num_hidden_layers=rng.choice([2, 3]), rope_theta=rng.choice([100.0, 10000.0]))
    return {
        "gpt2": (families["gpt2"][0], families["gpt2"][1](
            n_head=heads, n_layer=rng.choice([2, 3]), scale_attn_weights=rng.random() < 0.8,
            scale_attn_by_inverse_layer_idx=rng.random() < 0.5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "llama": (families["llama"][0], families["llama"][1](**llama_like, attention_bias=rng.random() < 0.5)),
        "qwen2": (families["qwen2"][0], families["qwen2"][1](**llama_like)),
        "qwen2-window": (families["qwen2"][0], families["qwen2"][1](
            **llama_like, use_sliding_window=True, sliding_window=window, max_window_layers=rng.choice([0, 1]))),
        "mistral": (families["mistral"][0], families["mistral"][1](**llama_like)),
        "mistral-window": (families["mistral"][0], families["mistral"][1](**llama_like, sliding_window=window)),
    }


def refused_decoders() -> dict:
    """{family: (model, the reason attach must name)}: tiny decoders whose attention the "bab_context" attention
    cannot reproduce."""
    import torch
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        GPTJConfig,
        GPTJForCausalLM,
        GptOssConfig,
        GptOssForCausalLM,
    )

    torch.manual_seed(0)
    small = dict(LLAMA_LIKE, head_dim=8)
    return {
        "gemma2-softcap": (Gemma2ForCausalLM(Gemma2Config(**small, attn_logit_softcapping=50.0, sliding_window=4)),
                           "soft-capping"),
        "gpt-oss-sinks": (GptOssForCausalLM(GptOssConfig(**{**small, "intermediate_size": 32}, num_local_experts=2,
                                                         num_experts_per_tok=1, sliding_window=4)), "sinks"),
        "gptj": (GPTJForCausalLM(GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=97,
                                            n_positions=32, **NO_SPECIAL)), "AttentionInterface"),
    }


def more_accepted_decoders() -> dict:
    """{family: (model class, config)}: tiny decoders beyond the four the docs list whose attention takes nothing the
    "bab_context" attention does not compute (Gemma2 without soft-capping, Qwen3's query/key norms, Phi3, Mixtral's
    experts with a window)."""
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
        Phi3Config,
        Phi3ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    small = dict(LLAMA_LIKE, head_dim=8)
    return {
        "gemma2-no-softcap": (Gemma2ForCausalLM, Gemma2Config(**small, attn_logit_softcapping=None,
                                                              final_logit_softcapping=None, sliding_window=4)),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(**small)),
        "phi3": (Phi3ForCausalLM, Phi3Config(**small)),
        "mixtral-window": (MixtralForCausalLM, MixtralConfig(**small, sliding_window=4, num_local_experts=2,
                                                             num_experts_per_tok=1)),
    }
