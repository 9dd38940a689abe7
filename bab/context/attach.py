"""Dynamic Context Pruning inside transformers' own decoders, without copying their forward.

``attach(model, pruning)`` gives every decoder layer of a transformers causal LM (GPT-2, Llama, Qwen2, Mistral:
any model whose layers' attention modules call ``ALL_ATTENTION_FUNCTIONS`` and carry ``layer_idx``) a
``ContextInteraction`` (bab.context.interaction), registered as the submodule ``interaction`` of the layer's
attention module. The parameter names are then those of bab's own decoders (``transformer.h.0.attn.interaction.*``,
``model.layers.0.self_attn.interaction.*``), so interaction weights move between the two as they are.

Three pieces do the work:

- a forward pre-hook on each attention module keeps its input x [B, T, d] (the hidden state after the layer's norm:
  what bab's ``PrunedAttention`` feeds its interaction) and, when the call carries a ``PrunedCache``
  (bab.context.pruned_cache), hands the interaction to that cache layer, which then drops tokens for good in
  ``update``;
- the attention implementation "bab_context" (``transformers.AttentionInterface``) adds log I to the causal mask
  and calls SDPA (grouped-query heads through ``enable_gqa``); with a ``PrunedCache`` it attends with the cache's
  visibility mask instead;
- the mask implementation "bab_context" (``transformers.AttentionMaskInterface``) is SDPA's boolean mask, always
  materialised (never the ``is_causal`` shortcut), so the attention always sees causality and padding.

``attach`` is exact or refuses (``check_attachable``: attention arguments the "bab_context" attention does not compute,
such as logit soft-capping or attention sinks, are refused before the model changes), puts the model back when it
fails half way, and ``detach`` undoes it; while attached the attention implementation cannot be changed.

The settings (alpha, budget, pruning on or off) live on a ``ContextState`` shared by the layers
(``context_state(model)``, ``set_alpha``, ``set_budget``, ``set_pruning``). After a full forward the state holds each
layer's own and effective log I, from which the training loop takes the sparsity term (``ContextState.sparsity``).

Shapes: B batch, T query tokens, K key tokens, d width, H query heads, G key/value heads, Dh head width, r
interaction width, L layers.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from bab.context.attention_arguments import (
    IMPLEMENTATION,
    call_arguments,
    check_argument,
    check_attention_call,
    decoder_attentions,
    pretrained_modules,
    refuse_attention_change,
    window,
)
from bab.context.interaction import (
    HARD,
    ContextInteraction,
    PruningConfig,
    drop_times,
    keep_mass,
    sparsity_term,
    validate_alpha,
)
from bab.context.masking import allowed_mask, always_materialised_mask, attend
from bab.context.pruned_cache import PrunedCache, PrunedLayer, Visibility

__all__ = ["ATTN_IMPLEMENTATION", "ContextState", "attach", "check_attachable", "context_state", "detach",
           "interactions", "is_attached", "load_attached", "set_alpha", "set_budget", "set_pruning", "token_drop_times"]

ATTN_IMPLEMENTATION = IMPLEMENTATION
CONFIG_KEY = "bab_context_pruning"  # where the PruningConfig is kept in model.config (saved in config.json)
STATE_ATTRIBUTE = "bab_context"  # the ContextState on the model and on each attention module


@dataclass
class ContextState:
    """What every attached layer reads (alpha, budget, prune) and what a full forward leaves behind.

    ``own[l]`` / ``effective[l]``: layer l's own log I and the log I it attended with (its own plus the layers' below
    with ``propagate_in_depth``), each [B, T, T], from the last forward without a ``PrunedCache``.
    """

    pruning: PruningConfig
    n_layers: int
    alpha: float = HARD
    budget: float | None = None
    prune: bool = True
    before: object = None  # what attach changed, as it was (detach restores it)
    # per layer, the sliding window its attention is called with (None: none), which a PrunedCache evicts by
    windows: list = field(default_factory=list)
    own: list = field(default_factory=list)
    effective: list = field(default_factory=list)
    # per layer, between the pre-hook and the attention function of the same call: the attention input x [B, T, d]
    # and the PrunedCache of the call (or None)
    inputs: dict = field(default_factory=dict)
    caches: dict = field(default_factory=dict)

    def __post_init__(self):
        self.clear()

    def clear(self) -> None:
        self.own = [None] * self.n_layers
        self.effective = [None] * self.n_layers

    def _recorded(self) -> list[torch.Tensor]:
        if any(o is None for o in self.own):
            raise RuntimeError("no log I recorded for every layer: run a forward pass with pruning on and without a "
                               "PrunedCache first")
        return self.own

    def keep_mass(self) -> torch.Tensor:
        """Mean over layers of each layer's mean own I over the pairs k > j (bab's ``LMOutput.keep_mass``)."""
        return torch.stack([keep_mass(o) for o in self._recorded()]).mean()

    def sparsity(self, normalisation: str = "causal_pairs") -> torch.Tensor:
        """The sparsity regulariser, mean over layers of ``sparsity_term`` of each layer's own log I (with gradient)."""
        return torch.stack(self.sparsity_terms(normalisation)).mean()

    def sparsity_terms(self, normalisation: str = "causal_pairs") -> list[torch.Tensor]:
        """The sparsity term of each layer, [L] scalars."""
        return [sparsity_term(o, normalisation) for o in self._recorded()]

    def drop_times(self) -> torch.Tensor:
        """[L, B, T]: the query that dropped each token in each layer (effective, hard forward), -1: never."""
        if any(e is None for e in self.effective):
            raise RuntimeError("no log I recorded: run a hard forward pass (alpha = inf) with pruning on first")
        return torch.stack([drop_times(e) for e in self.effective])


# ---------------------------------------------------------------------- attaching


def is_attached(model: nn.Module) -> bool:
    return isinstance(getattr(model, STATE_ATTRIBUTE, None), ContextState)


def context_state(model: nn.Module) -> ContextState:
    if not is_attached(model):
        raise ValueError("this model has no context pruning attached; call bab.context.attach.attach(model, pruning)")
    return getattr(model, STATE_ATTRIBUTE)


def interactions(model: nn.Module) -> list[ContextInteraction]:
    """The ContextInteraction of every layer, in order."""
    return [attention.interaction for attention in decoder_attentions(model)]


def attach(model: nn.Module, pruning: PruningConfig, alpha: float = HARD, budget: float | None = None) -> nn.Module:
    """Give every decoder layer of ``model`` (a transformers causal LM) a ContextInteraction and route its attention
    through "bab_context". Returns the same model. ``alpha``, ``budget``: the initial settings (``set_alpha``,
    ``set_budget`` change them). The PruningConfig is kept in ``model.config`` so ``load_attached`` can rebuild it.

    Exact or refused: every check that can refuse runs before the model is changed (``check_attachable``), and a
    failure while attaching puts the model back as it was. ``detach`` undoes it. While attached, the attention
    implementation cannot be changed (the cache would go on dropping tokens the attention no longer hides)."""
    if not isinstance(pruning, PruningConfig):
        raise TypeError(f"attach needs a bab.context.interaction.PruningConfig, got {type(pruning).__name__}")
    alpha = validate_alpha(alpha)
    if budget is not None and not pruning.budget_conditioned:  # (a budget-conditioned model may get it later)
        raise ValueError("budget is only taken by a PruningConfig(budget_conditioned=True); pass budget=None")
    if budget is not None and not 0 < budget <= 1:
        raise ValueError(f"budget must lie in (0, 1], got {budget}")
    attentions = check_attachable(model)
    _register()  # global registrations (no model is changed): the implementation must exist to be checked
    model.get_correct_attn_implementation(ATTN_IMPLEMENTATION)  # raises if transformers would refuse it
    before = _Before.of(model)
    hidden = model.config.hidden_size
    reference = next(model.parameters())
    try:
        for attention in attentions:
            interaction = ContextInteraction(hidden, pruning).to(device=reference.device, dtype=reference.dtype)
            attention.add_module("interaction", interaction)
            attention.register_forward_pre_hook(_capture_input, with_kwargs=True)
        state = ContextState(pruning=pruning, n_layers=len(attentions), alpha=alpha, budget=budget, before=before,
                             windows=[window(attention) for attention in attentions])
        for module in (model, *attentions):
            object.__setattr__(module, STATE_ATTRIBUTE, state)  # a plain attribute: not a submodule, not in state dict
        setattr(model.config, CONFIG_KEY, asdict(pruning))  # saved in config.json by save_pretrained
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
        refused = [i for i, a in enumerate(attentions) if a.config._attn_implementation != ATTN_IMPLEMENTATION]
        if model.config._attn_implementation != ATTN_IMPLEMENTATION or refused:
            raise RuntimeError(f"{type(model).__name__} refused the attention implementation {ATTN_IMPLEMENTATION!r}")
        for module in pretrained_modules(model):  # set_attn_implementation now refuses (detach lifts it)
            object.__setattr__(module, "set_attn_implementation", refuse_attention_change)
    except BaseException:
        before.restore(model, attentions)
        raise
    return model


def detach(model: nn.Module) -> nn.Module:
    """Undo ``attach``: the interaction modules, the hooks, the state, the config key and the attention
    implementation back to what they were before; the model then computes what it computed before ``attach``.
    Returns the same model."""
    state = context_state(model)
    state.before.restore(model, decoder_attentions(model))
    return model


def check_attachable(model: nn.Module) -> list[nn.Module]:
    """Every reason ``attach`` would refuse ``model``, checked without changing it; returns its attention modules.

    Accepted: a causal decoder whose every layer's attention module calls transformers' ``ALL_ATTENTION_FUNCTIONS``
    with arguments the "bab_context" attention honours (``HONOURED``: dropout and scaling go to SDPA, a sliding
    window is in the mask transformers builds) or that hold nothing (None). Refused with the reason: an attention
    that bypasses the interface (GPT-J), logit soft-capping (Gemma2's ``attn_logit_softcapping``), attention sinks
    (GPT-OSS's ``s_aux``), any other extra argument, cross-attention, a non-causal attention."""
    if is_attached(model):
        raise ValueError("context pruning is already attached to this model (detach(model) removes it)")
    name = type(model).__name__
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        raise ValueError(f"{name} is not a transformers PreTrainedModel: attach takes a transformers causal LM")
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError(f"{name} has cross-attention, which the {ATTN_IMPLEMENTATION!r} attention does not prune: "
                         "attach takes a decoder-only causal LM")
    if not model._can_set_attn_implementation():
        raise ValueError(f"{name} does not route its attention through transformers' AttentionInterface "
                         f"(ALL_ATTENTION_FUNCTIONS), so the {ATTN_IMPLEMENTATION!r} attention would never run")
    attentions = decoder_attentions(model)
    checked = set()
    for attention in attentions:
        if "interaction" in attention._modules or hasattr(attention, "interaction"):
            raise ValueError(f"{type(attention).__name__} already has an attribute 'interaction'")
        if getattr(attention, "is_causal", True) is False:
            raise ValueError(f"{type(attention).__name__} is not causal; context pruning needs a causal decoder")
        if getattr(attention, "config", None) is None:
            raise ValueError(f"{type(attention).__name__} has no config to read its attention implementation from")
        if type(attention) not in checked:
            check_attention_call(attention)
            checked.add(type(attention))
        for argument, value in call_arguments(attention).items():
            check_argument(attention, argument, value)
    return attentions


@dataclass
class _Before:
    """What ``attach`` changes on a model, as it was before: each config's attention implementation and the config
    key. ``restore`` undoes whatever part of ``attach`` was done (interactions, hooks, state, guards)."""

    implementations: list  # [(config, _attn_implementation_internal)]
    had_key: bool
    key_value: object

    @classmethod
    def of(cls, model: nn.Module) -> _Before:
        configs, stack = {}, [m.config for m in pretrained_modules(model) if getattr(m, "config", None) is not None]
        while stack:
            config = stack.pop()
            if id(config) not in configs:
                configs[id(config)] = config
                stack += [getattr(config, key) for key in getattr(config, "sub_configs", {})
                          if getattr(config, key, None) is not None]
        return cls([(c, c.__dict__.get("_attn_implementation_internal")) for c in configs.values()],
                   hasattr(model.config, CONFIG_KEY), getattr(model.config, CONFIG_KEY, None))

    def restore(self, model: nn.Module, attentions: list[nn.Module]) -> None:
        for module in pretrained_modules(model):
            if module.__dict__.get("set_attn_implementation") is refuse_attention_change:
                del module.__dict__["set_attn_implementation"]
        for config, implementation in self.implementations:
            config._attn_implementation_internal = implementation  # the attribute itself: no checks, no recursion
        if self.had_key:
            setattr(model.config, CONFIG_KEY, self.key_value)
        elif hasattr(model.config, CONFIG_KEY):
            delattr(model.config, CONFIG_KEY)
        for attention in attentions:
            attention._modules.pop("interaction", None)
            # by identity, not by handle: a deep copy of an attached model shares no handle with the original
            for key in [k for k, hook in attention._forward_pre_hooks.items() if hook is _capture_input]:
                attention._forward_pre_hooks.pop(key)
                attention._forward_pre_hooks_with_kwargs.pop(key, None)
        for module in (model, *attentions):
            module.__dict__.pop(STATE_ATTRIBUTE, None)


def set_alpha(model: nn.Module, alpha: float) -> None:
    """alpha of the alpha-sigmoid: 1 the plain sigmoid, inf (``HARD``) binary decisions."""
    context_state(model).alpha = validate_alpha(alpha)


def set_budget(model: nn.Module, budget: float | None) -> None:
    """The requested keep budget in (0, 1] of a budget-conditioned model; None for the others."""
    state = context_state(model)
    if state.pruning.budget_conditioned != (budget is not None):
        # the same check as ContextInteraction.bias_for, made here so the error comes before a forward pass
        interactions(model)[0].bias_for(budget)
    if budget is not None and not 0 < budget <= 1:
        raise ValueError(f"budget must lie in (0, 1], got {budget}")
    state.budget = budget


def set_pruning(model: nn.Module, prune: bool) -> None:
    """Turn the interactions on or off (off: the plain decoder, as bab's ``forward(prune=False)``)."""
    context_state(model).prune = bool(prune)


@torch.no_grad()
def token_drop_times(model: nn.Module, input_ids: torch.Tensor, **forward_kwargs) -> torch.Tensor:
    """[L, B, T]: the position whose arrival dropped each token in each layer (hard decisions), -1: never."""
    state = context_state(model)
    if not (state.prune and state.pruning.irreversible):
        raise ValueError("drop times are defined for a model with irreversible context pruning turned on")
    alpha = state.alpha
    state.alpha = HARD
    try:
        model(input_ids, use_cache=False, **forward_kwargs)
    finally:
        state.alpha = alpha
    return state.drop_times()


def load_attached(model_class, path: str, **from_pretrained_kwargs) -> nn.Module:
    """Reload what ``save_pretrained`` wrote for an attached model: the transformers model, re-attached with the
    PruningConfig kept in its config, and the interaction weights from the checkpoint's safetensors files."""
    from safetensors.torch import load_file

    model = model_class.from_pretrained(path, **from_pretrained_kwargs)
    stored = getattr(model.config, CONFIG_KEY, None)
    if stored is None:
        raise ValueError(f"{path} holds no {CONFIG_KEY!r} in its config: it was not saved from an attached model")
    attach(model, PruningConfig(**stored))
    state = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        state.update({k: v for k, v in load_file(file).items() if ".interaction." in k})
    expected = {k for k in model.state_dict() if ".interaction." in k}
    if set(state) != expected:
        raise ValueError(f"{path}: interaction weights missing {sorted(expected - set(state))}, "
                         f"unexpected {sorted(set(state) - expected)}")
    model.load_state_dict(state, strict=False)
    return model


# ---------------------------------------------------------------------- the hook and the attention function


def _capture_input(module: nn.Module, args: tuple, kwargs: dict):
    """Forward pre-hook of an attention module: keep x for the attention function; stage a PrunedCache's update."""
    state: ContextState = getattr(module, STATE_ATTRIBUTE)
    implementation = module.config._attn_implementation
    if implementation != ATTN_IMPLEMENTATION:
        raise ValueError(f"context pruning is attached but the attention implementation was changed to "
                         f"{implementation!r}: the interactions would be ignored (and a PrunedCache would drop tokens "
                         f"the attention still sees); set it back to {ATTN_IMPLEMENTATION!r} or call detach(model)")
    x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    layer = module.layer_idx
    cache = kwargs.get("past_key_values")
    cache = cache if isinstance(cache, PrunedCache) else None
    if layer == 0:
        state.clear()
    state.inputs[layer] = x
    state.caches[layer] = cache
    if cache is not None:
        prunes = state.prune
        if prunes and not math.isinf(state.alpha):
            raise ValueError("a PrunedCache removes tokens for good, which needs hard decisions: "
                             "set_alpha(model, HARD) before a cached forward (or generate)")
        if prunes and not state.pruning.irreversible:
            raise ValueError("a PrunedCache can only forget tokens when dropping is irreversible; this model was "
                             "attached with PruningConfig(irreversible=False): generate without it")
        # with depth propagation this layer publishes its drops to the layer above, which may see further back than
        # this layer's window: then the cache keeps what the window passed (correct, not smaller)
        window = None if state.pruning.propagate_in_depth else state.windows[layer]
        cache.stage(layer, x, module.interaction if prunes else None, state.budget, state.pruning.propagate_in_depth,
                    window)


def context_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """The "bab_context" attention: query [B, H, T, Dh], key/value [B, G, K, Dh] -> output [B, T, H, Dh].

    Without a PrunedCache: log I [B, T, T] of the layer's interaction (soft at alpha < inf, 0 / -inf at alpha = inf)
    is added to the causal mask (K = T: the whole sequence in one call). With one: the cache has just dropped tokens
    and appended the new ones, and its visibility mask [B, T, K] (per-row padding, drops within the call) is AND-ed
    with transformers' mask gathered at the positions the kept slots hold.
    """
    state: ContextState = getattr(module, STATE_ATTRIBUTE)
    for argument, given in kwargs.items():  # what the checks at attach could not see (arguments from **kwargs)
        check_argument(module, argument, given)
    layer = module.layer_idx
    x, cache = state.inputs.pop(layer, None), state.caches.pop(layer, None)
    T, K = query.shape[2], key.shape[2]
    if cache is not None:
        cache_layer = cache.layers[layer]
        if cache_layer.window is not None and kwargs.get("sliding_window") != cache_layer.window:
            raise ValueError(f"layer {layer} was attached with sliding window {cache_layer.window} (the PrunedCache "
                             f"evicts by it) but its attention now gets {kwargs.get('sliding_window')}: re-attach")
        allowed = allowed_mask(attention_mask, T, cache_layer.seen, query.device)
        return _attend_cached(query, key, value, allowed, cache_layer.pop_visibility(), dropout, scaling), None
    allowed = allowed_mask(attention_mask, T, K, query.device)
    if state.prune:
        if K != T:
            raise ValueError(f"the {ATTN_IMPLEMENTATION!r} attention computes log I over the call's own tokens (got "
                             f"{T} queries and {K} keys): pass past_key_values=PrunedCache() for cached decoding, or "
                             "use_cache=False")
        own, _ = module.interaction.log_keep(x, state.alpha, state.budget)  # [B, T, T]
        effective = own
        if state.pruning.propagate_in_depth and layer > 0:
            effective = own + state.effective[layer - 1]
        state.own[layer], state.effective[layer] = own, effective
        mask = effective[:, None].masked_fill(~allowed, -math.inf)  # [B, 1, T, T]
    else:
        mask = allowed
    return attend(query, key, value, mask, dropout, scaling), None


def _attend_cached(query, key, value, allowed: torch.Tensor, visibility: Visibility, dropout: float,
                   scaling: float | None) -> torch.Tensor:
    """Attention through a PrunedCache: each block of ``PrunedLayer.PREFILL_CHUNK`` queries over the slots up to its
    last query, masked by what the cache's update left visible AND transformers' mask (causality and padding, over
    the tokens seen: ``allowed`` [B or 1, 1, T, seen + T]) at the positions the slots hold. A decode step is one
    block; the prompt costs about causal attention and no [B, T, K] mask is built."""
    T, chunk = query.shape[2], PrunedLayer.PREFILL_CHUNK
    outputs = []
    for start in range(0, T, chunk):
        stop = min(start + chunk, T)
        keys = visibility.keys(stop)
        allowed_here = allowed[:, :, start:stop]
        if visibility.in_order:  # slot i holds position i
            allowed_here = allowed_here[..., :keys]
        else:  # slots without a token (-1) are invisible anyway
            positions = visibility.positions[:, :keys].clamp_min(0)
            allowed_here = allowed_here.expand(positions.shape[0], 1, stop - start, -1)
            allowed_here = allowed_here.gather(3, positions[:, None, None, :].expand(-1, 1, stop - start, -1))
        mask = allowed_here & visibility.mask(start, stop)[:, None]
        outputs.append(attend(query[:, :, start:stop], key[:, :, :keys], value[:, :, :keys], mask, dropout, scaling))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)


def _register() -> None:
    AttentionInterface.register(ATTN_IMPLEMENTATION, context_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, always_materialised_mask)
