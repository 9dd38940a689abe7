"""Budgeted head gates inside transformers' own encoders and ViTs, without copying their forward.

``attach(model, gates="budget")`` takes a transformers BERT, RoBERTa, DistilBERT, ViT or DeiT model (any head on
top: sequence or image classification, the bare encoder) and returns the same model object with

- a gate module (``bab.heads.gates.make_gates``: "budget" for Eq. 1's budget-conditioned gates, "static" for one
  specialist's, None for explicit head masks only) registered as the submodule ``head_gates``, and the gate kind
  kept in ``model.config`` under ``bab_head_gates``, so ``save_pretrained`` writes both and ``load_attached``
  rebuilds the model with its gates;
- a forward pre-hook on every layer's attention output projection (BERT / RoBERTa ``attention.output.dense``,
  DistilBERT ``attention.out_lin``, ViT / DeiT ``attention.o_proj``) that multiplies each head's slice of the
  projection's input by that head's weight (Eq. 2: o_lh = g_lh(b) * head_lh(x)). The projection's input is the
  concatenated head outputs whatever kernel computed them, so the gates compose with every attention
  implementation: eager, SDPA, or one another bab method registers.

The settings (mode, budget, an explicit head mask) live on a ``HeadGateState`` shared by the layers
(``head_state(model)``, ``set_budget``, ``set_head_mask``, ``set_dense``). Each forward computes the weights
[L, H] once, in the hook of layer 0, with ``bab.heads.gates.head_weights`` (the one function every head-gated
model in bab uses), and leaves them on the state with the soft gates and the estimated cost (``last_cost``: the
mean gate mass in soft mode, with its gradient, so a training loop adds it to its loss and trains
``model.head_gates`` like any other parameters).

A model whose heads were pruned structurally (``bab.heads.hf_pruning.prune_heads``: the config lists the kept
heads) keeps working: each layer takes the weights of the heads it still has.

Shapes: B batch, T tokens (or patches), L layers, H heads per layer of the unpruned model, n heads a layer has
now, Dh head width.
"""

from __future__ import annotations

import glob
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import torch
from torch import nn

from bab.heads.gates import BudgetGates, StaticGates, attention_cost, head_weights, make_gates, scale_heads

__all__ = ["CONFIG_KEY", "GATES_NAME", "KEPT_HEADS_KEY", "MODES", "SUPPORTED_MODEL_TYPES", "HeadGateState", "attach",
           "detach", "gate_settings", "head_state", "is_attached", "last_cost", "load_attached", "output_projections",
           "set_budget", "set_dense", "set_head_mask"]

CONFIG_KEY = "bab_head_gates"  # the gate kind in model.config (saved in config.json by save_pretrained)
STATE_ATTRIBUTE = "bab_head_gates"  # the HeadGateState on the model; a _LayerHandle on each output projection
GATES_NAME = "head_gates"  # the gate module's submodule name on the model
# Where a model pruned structurally (bab.heads.hf_pruning, which writes it) lists, per layer, the original indices of
# the heads it kept; here so the hooks can read it without importing pruning, which builds on this module.
KEPT_HEADS_KEY = "bab_kept_heads"
MODES = ("dense", "soft", "hard")

# Per model type: where the layers are (from the base model), and in each layer the attention module (which knows
# its head width) and its output projection.
_LAYOUTS = {
    "bert": ("encoder.layer", "attention.self", "attention.output.dense"),
    "roberta": ("encoder.layer", "attention.self", "attention.output.dense"),
    "distilbert": ("transformer.layer", "attention", "attention.out_lin"),
    "vit": ("layers", "attention", "attention.o_proj"),
    "deit": ("layers", "attention", "attention.o_proj"),
}
SUPPORTED_MODEL_TYPES = tuple(_LAYOUTS)


@dataclass(eq=False)
class HeadGateState:
    """What every gated layer reads (the settings) and what the last forward left behind.

    Settings: ``gates`` (the gate module soft and hard mode read, or None), ``mode`` ("dense": every head as it
    is; "soft": heads times g(b); "hard": heads times the global top-k mask, straight-through to the soft gates),
    ``budget``, ``head_mask`` (binary [L, H], replaces the top-k in hard mode), ``min_per_layer`` (hard mode's
    per-layer floor; 0: the paper's global top-k).

    After a forward: ``weights`` [L, H] what multiplied the heads (None in dense mode), ``soft_gates`` [L, H] the
    soft gates (None in dense mode or with an explicit mask), ``cost`` the estimated attention cost
    (``bab.heads.gates.attention_cost``).
    """

    num_layers: int
    num_heads: int
    gates: nn.Module | None = field(default=None, repr=False)
    mode: str = "dense"
    budget: float | None = None
    head_mask: torch.Tensor | None = None
    min_per_layer: int = 0
    config: Any = field(default=None, repr=False)  # model.config: where a pruned model lists its kept heads
    weights: torch.Tensor | None = field(default=None, repr=False)
    soft_gates: torch.Tensor | None = field(default=None, repr=False)
    cost: torch.Tensor | None = field(default=None, repr=False)

    def __getstate__(self) -> dict:
        # the last forward's records carry autograd graphs, which neither copy.deepcopy (a teacher, a model to prune)
        # nor pickle can take along; a copy starts with none, as after attaching
        return {**self.__dict__, "weights": None, "soft_gates": None, "cost": None}

    @property
    def shape(self) -> tuple[int, int]:
        return self.num_layers, self.num_heads

    def configure(self, gates: nn.Module | None, mode: str, budget: float | None = None,
                  head_mask: torch.Tensor | None = None, min_per_layer: int = 0) -> None:
        """Set every setting at once, checked now so a bad one fails before a forward pass rather than inside it."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        with torch.no_grad():  # the forward's own computation, once, for its errors
            head_weights(gates, budget, mode, head_mask, self.shape, torch.float32, min_per_layer)
        self.gates, self.mode, self.budget, self.head_mask, self.min_per_layer = (gates, mode, budget, head_mask,
                                                                                   min_per_layer)

    def begin(self, device: torch.device, dtype: torch.dtype) -> None:
        """Compute this forward's weights, soft gates and cost from the settings (the hook of layer 0 calls it)."""
        weights, soft = head_weights(self.gates, self.budget, self.mode, self.head_mask, self.shape, dtype,
                                     self.min_per_layer)
        self.weights = None if weights is None else weights.to(device)
        self.soft_gates = soft
        self.cost = attention_cost(weights, self.mode, device)

    def layer_weights(self, layer: int, heads_now: int) -> torch.Tensor:
        """[n] the weights of the heads layer ``layer`` still has (all H unless pruned structurally)."""
        weights = self.weights[layer]
        if heads_now == self.num_heads:
            return weights
        kept = getattr(self.config, KEPT_HEADS_KEY, None)
        if kept is None or len(kept[layer]) != heads_now:
            raise RuntimeError(f"layer {layer} has {heads_now} heads, the gates {self.num_heads}, and the config "
                               f"does not list which heads it kept ({KEPT_HEADS_KEY}); prune with "
                               "bab.heads.hf_pruning.prune_heads")
        return weights[torch.tensor(kept[layer], device=weights.device)]


@dataclass(frozen=True)
class _LayerHandle:
    """What an output projection's hook needs: the shared state, its layer and its head width."""

    state: HeadGateState
    layer: int
    head_dim: int


# ---------------------------------------------------------------------- the layers of a model


def output_projections(model: nn.Module) -> list[tuple[nn.Linear, int]]:
    """(the attention output projection, its head width Dh) of every layer of ``model``, in order."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in _LAYOUTS:
        raise ValueError(f"head gates attach to transformers' BERT, RoBERTa, DistilBERT, ViT and DeiT models "
                         f"(model_type in {SUPPORTED_MODEL_TYPES}), got {type(model).__name__} with model_type "
                         f"{model_type!r}")
    layers_path, attention_path, out_path = _LAYOUTS[model_type]
    try:
        layers = attrgetter(layers_path)(getattr(model, "base_model", model))
        found = [(attrgetter(out_path)(layer), _head_dim(attrgetter(attention_path)(layer))) for layer in layers]
    except AttributeError as error:
        raise ValueError(f"cannot find the attention output projections of {type(model).__name__} "
                         f"({layers_path}[i].{out_path}): {error}") from None
    if not found or not all(isinstance(out, nn.Linear) for out, _ in found):
        raise ValueError(f"{type(model).__name__}: expected an nn.Linear at {layers_path}[i].{out_path} in every layer")
    return found


def _head_dim(attention: nn.Module) -> int:
    """The head width of an attention module (BERT, RoBERTa, DistilBERT: ``attention_head_size``; ViT: ``head_dim``)."""
    width = getattr(attention, "attention_head_size", None) or getattr(attention, "head_dim", None)
    if not isinstance(width, int):
        raise ValueError(f"{type(attention).__name__} has neither attention_head_size nor head_dim")
    return width


def _num_heads(config) -> int:
    """H of the unpruned model (pruning changes the modules, never the config's head count)."""
    return int(config.n_heads if config.model_type == "distilbert" else config.num_attention_heads)


# ---------------------------------------------------------------------- attaching


def is_attached(model: nn.Module) -> bool:
    return isinstance(getattr(model, STATE_ATTRIBUTE, None), HeadGateState)


def head_state(model: nn.Module) -> HeadGateState:
    if not is_attached(model):
        raise ValueError("this model has no head gates attached; call bab.heads.attach.attach(model, gates='budget')")
    return getattr(model, STATE_ATTRIBUTE)


def attach(model: nn.Module, gates: str | nn.Module | None = "budget", temperature: float = 1.0,
           init_logit: float = 0.0, save_with_model: bool = True) -> nn.Module:
    """Gate every attention head of ``model`` (a transformers BERT, RoBERTa, DistilBERT, ViT or DeiT). Returns the
    same model, in dense mode until ``set_budget`` or ``set_head_mask``.

    ``gates``: "budget" or "static" (built by ``make_gates`` with ``temperature`` and ``init_logit``), None (explicit
    head masks only), or a gate module of one's own mapping a budget to [L, H].
    ``save_with_model``: register the gates as ``model.head_gates`` and their kind in ``model.config``, so
    ``save_pretrained`` writes them and ``load_attached`` reads them back. False: the caller keeps and saves the
    gates itself (``GatedHFClassifier``), and the model's state dict and config stay exactly transformers'.
    """
    if is_attached(model):
        raise ValueError(f"head gates are already attached to this {type(model).__name__}; set_budget / "
                         "set_head_mask change their settings, detach(model) removes them")
    projections = output_projections(model)
    shape = (len(projections), _num_heads(model.config))
    reference = projections[0][0].weight
    if isinstance(gates, str) or gates is None:
        kind = gates
        gates = make_gates(kind, *shape, temperature, init_logit)
        gates = None if gates is None else gates.to(device=reference.device, dtype=reference.dtype)
    else:
        kind = _kind_of(gates) if save_with_model else None
        with torch.no_grad():
            produced = tuple(gates(1.0).shape)
        if produced != shape:
            raise ValueError(f"the gate module gives {produced} gates, the model has {shape[0]} layers x {shape[1]} "
                             "heads")
    if save_with_model:
        if hasattr(model, GATES_NAME):
            raise ValueError(f"{type(model).__name__} already has an attribute {GATES_NAME!r}")
        if gates is not None:
            model.add_module(GATES_NAME, gates)
        setattr(model.config, CONFIG_KEY, {"gates": kind, "temperature": float(getattr(gates, "temperature", 1.0)),
                                           "init_logit": float(init_logit)})
    state = HeadGateState(*shape, gates=gates, config=model.config)
    for layer, (out, head_dim) in enumerate(projections):
        object.__setattr__(out, STATE_ATTRIBUTE, _LayerHandle(state, layer, head_dim))  # plain: not in state_dict
        out.register_forward_pre_hook(_gate_heads)
    object.__setattr__(model, STATE_ATTRIBUTE, state)
    return model


def _kind_of(gates: nn.Module) -> str:
    """The ``make_gates`` kind a gate module is, for ``load_attached`` to rebuild it."""
    if isinstance(gates, BudgetGates):
        return "budget"
    if isinstance(gates, StaticGates):
        return "static"
    raise ValueError(f"load_attached can rebuild BudgetGates and StaticGates, not {type(gates).__name__}; "
                     "pass save_with_model=False and save the gates yourself")


def detach(model: nn.Module) -> nn.Module:
    """Remove what ``attach`` added (hooks, state, ``head_gates``, the config key): a plain transformers model again.
    Works on a ``copy.deepcopy`` of an attached model too (the hooks are found by function, not by handle)."""
    state = head_state(model)
    for out, _ in output_projections(model):
        for key in [key for key, hook in out._forward_pre_hooks.items() if hook is _gate_heads]:
            del out._forward_pre_hooks[key]
        out.__dict__.pop(STATE_ATTRIBUTE, None)
    model.__dict__.pop(STATE_ATTRIBUTE, None)
    if state.gates is not None and getattr(model, GATES_NAME, None) is state.gates:
        delattr(model, GATES_NAME)
    if hasattr(model.config, CONFIG_KEY):
        delattr(model.config, CONFIG_KEY)
    return model


# ---------------------------------------------------------------------- the settings


def set_budget(model: nn.Module, budget: float, mode: str = "soft", min_per_layer: int = 0) -> None:
    """Gate the heads at ``budget`` in (0, 1]: "soft" (heads times g(b)) or "hard" (the top-k heads, straight-through
    to the soft gates; ``min_per_layer`` >= 1 keeps that many in every layer, what structural pruning needs)."""
    state = head_state(model)
    if mode == "dense":
        raise ValueError("set_budget takes mode 'soft' or 'hard'; set_dense(model) turns the gates off")
    state.configure(state.gates, mode, budget, None, min_per_layer)


def set_head_mask(model: nn.Module, head_mask: torch.Tensor) -> None:
    """Keep exactly the heads where the binary ``head_mask`` [L, H] is 1 (no gates needed)."""
    state = head_state(model)
    state.configure(state.gates, "hard", None, head_mask)


def set_dense(model: nn.Module) -> None:
    """Every head as it is: the plain model's outputs (cost 1)."""
    state = head_state(model)
    state.configure(state.gates, "dense")


@contextmanager
def gate_settings(model: nn.Module, gates: nn.Module | None, mode: str, budget: float | None = None,
                  head_mask: torch.Tensor | None = None, min_per_layer: int = 0):
    """Settings for the forwards inside the ``with`` block, those before restored after it; yields the state.

    ``gates`` is a setting here too: a wrapper that owns its gates (``GatedHFClassifier``) passes them on every call,
    so two wrappers may share one transformers model, or wrap a copy of another's.
    """
    state = head_state(model)
    before = (state.gates, state.mode, state.budget, state.head_mask, state.min_per_layer)
    state.configure(gates, mode, budget, head_mask, min_per_layer)
    try:
        yield state
    finally:
        state.gates, state.mode, state.budget, state.head_mask, state.min_per_layer = before


def last_cost(model: nn.Module) -> torch.Tensor:
    """The estimated attention cost of the last forward (a scalar; with its gradient to the gates in soft mode)."""
    cost = head_state(model).cost
    if cost is None:
        raise RuntimeError("no forward pass has run since the head gates were attached")
    return cost


# ---------------------------------------------------------------------- the hook


def _gate_heads(module: nn.Linear, args: tuple):
    """Forward pre-hook of an output projection: its input x [B, T, n * Dh] with each head's slice times its weight."""
    handle: _LayerHandle = getattr(module, STATE_ATTRIBUTE)
    state, x = handle.state, args[0]
    if handle.layer == 0:
        state.begin(x.device, module.weight.dtype)
    if state.weights is None:
        return None
    *lead, width = x.shape
    heads_now = width // handle.head_dim
    weights = state.layer_weights(handle.layer, heads_now)
    gated = scale_heads(x.view(*lead, heads_now, handle.head_dim), weights, len(lead)).view(*lead, width)
    return (gated, *args[1:])


# ---------------------------------------------------------------------- reloading


def load_attached(model_class, path: str, **from_pretrained_kwargs) -> nn.Module:
    """Reload what ``save_pretrained`` wrote for an attached model: the transformers model, re-attached with the gate
    kind kept in its config, and the gate weights from the checkpoint's safetensors files. In dense mode."""
    from safetensors.torch import load_file

    model = model_class.from_pretrained(path, **from_pretrained_kwargs)
    stored = getattr(model.config, CONFIG_KEY, None)
    if stored is None:
        raise ValueError(f"{path} holds no {CONFIG_KEY!r} in its config: it was not saved from a model with head "
                         "gates attached")
    attach(model, stored["gates"], stored["temperature"], stored["init_logit"])
    prefix = GATES_NAME + "."
    weights = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        weights.update({k: v for k, v in load_file(file).items() if k.startswith(prefix)})
    expected = {k for k in model.state_dict() if k.startswith(prefix)}
    if set(weights) != expected:
        raise ValueError(f"{path}: gate weights missing {sorted(expected - set(weights))}, "
                         f"unexpected {sorted(set(weights) - expected)}")
    model.load_state_dict(weights, strict=False)
    return model
