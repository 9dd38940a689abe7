"""Sparsifiner inside transformers' own ViT and DeiT, without copying their forward.

``attach(model, ConnectivityConfig(n_down=8), core="masked", keep=0.25)`` takes a ``ViTForImageClassification``
or ``DeiTForImageClassification`` (or any model whose base is a ``ViTModel`` / ``DeiTModel``) and

- gives every layer's attention module a ``ConnectivityPredictor`` (bab.sparsifiner.predictor) as its submodule
  ``connectivity_predictor``: the weights are in ``state_dict`` (``vit.layers.0.attention.connectivity_predictor.
  w_down``), so ``save_pretrained`` writes them and ``load_attached`` reads them back;
- registers the attention implementation "bab_sparsifiner" (``transformers.AttentionInterface``) and switches the
  model to it. transformers' ``ViTAttention.forward`` projects q, k, v [B, H, n, d] and hands them to the
  implementation, which is all the predictor needs (bab's own ViT feeds it q and k too), so no hook is needed for
  it. The implementation runs bab's attention core chosen by name (``bab.sparsifiner.attention``):
  ``dense`` (SDPA: the unattached model), ``masked`` (dense scores masked to the predictor's top-k),
  ``sparse`` (gathered / CSR keys) or ``fused`` (the C++ kernel, float32 CPU inference), or ``linformer`` where
  the model was attached with ``linformer_len`` (each layer then holds a ``LinformerProjection`` as its submodule
  ``linformer_projection``: the low-rank baseline of the Sparsifiner paper's Table 4, run by the same
  implementation).

No attention mask reaches the implementation: transformers builds masks only for implementations it knows, and
returns the caller's mask (None for images) otherwise, so a mask passed in is refused with an error.

The settings of the next forward (core, keep rate, whether to compute the predictor's scores, token pruning) live
on a ``SparsifinerState`` shared by the layers (``sparsifiner_state(model)``, ``configure``).
After a forward the state holds each layer's internals as bab's ViT returns them in ``ViTOutput.layers`` (the
predictor's index and coefficients, its scores with ``with_predictor``, the attention probabilities where
computed, the token positions), the final layer-normed tokens and the attention cores' multiply-adds.

EViT-style token pruning between layers is ``bab.sparsifiner.attach_tokens``.

The hooks (a pre-hook on the embeddings starts each forward's record, a hook on the final layernorm keeps the tokens)
and the attention implementation find the state on their own module, so ``copy.deepcopy`` of an attached model (a
teacher) gets a state of its own. Not supported, each with an error saying so: attention dropout, an attention mask,
images larger than the predictors were built for (``interpolate_pos_encoding``), and gradient checkpointing (its
recomputation in the backward pass would run a layer again after the state has moved on).

Shapes: B batch, H heads, n tokens in the current layer (after any pruning), d head width, D hidden width,
n_q = n - first_query predicted queries, k = ceil(keep_rate * n) kept keys per query, L layers.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface

from bab.core.losses import attention_distillation_loss
from bab.sparsifiner.attention import SELECTIONS, CoreInputs, attention_core
from bab.sparsifiner.kernels import SPARSE_KERNELS, connectivity_mask, dense_attention_macs
from bab.sparsifiner.linformer import LinformerProjection
from bab.sparsifiner.predictor import ConnectivityConfig, ConnectivityPredictor, validate_keep_rate

__all__ = ["ATTN_IMPLEMENTATION", "CORES", "LINFORMER_NAME", "PREDICTOR_NAME", "SparsifinerState", "attach",
           "configure", "is_attached", "load_attached", "predictors", "sparsifiner_state"]

ATTN_IMPLEMENTATION = "bab_sparsifiner"
CONFIG_KEY = "bab_sparsifiner"  # the predictor settings in model.config (saved in config.json by save_pretrained)
STATE_ATTRIBUTE = "bab_sparsifiner"  # the state on the model; a _LayerHandle on each attention module
PREDICTOR_NAME = "connectivity_predictor"  # the predictor's submodule name in each attention module
LINFORMER_NAME = "linformer_projection"  # the Linformer projection's submodule name, where attached
CORES = ("dense", "masked", "sparse", "fused", "linformer")
PREDICTOR_CORES = ("masked", "sparse", "fused")  # the cores that attend over the predictor's connections
SUPPORTED_MODEL_TYPES = ("vit", "deit")


@dataclass
class SparsifinerState:
    """The settings every attached layer reads, and what the last forward left behind.

    Settings: ``core`` and ``keep_rate`` (validated by ``configure``); ``with_predictor``: also compute the
    predictor's differentiable scores (phase 1 on a dense pass, or phase 2's Eq. 10); ``record_probs``: keep every
    layer's attention probabilities; ``sparse_kernel``: the sparse core's "auto", "csr" or "gather";
    ``token_keep`` / ``prune_layers`` / ``fuse_tokens``: EViT pruning after those layers (set by
    ``bab.sparsifiner.attach_tokens.set_token_pruning``).

    After a forward: ``layers[l]`` is layer l's dict (keys as bab's ViT internals: "n", "positions", "macs",
    "index" [B, H, n_q, k], "coefficients" [B, H, n_q, n_down], "first_query", with ``with_predictor`` "scores" and
    "phase1_scores" [B, H, n_q, n], and where computed "probs" [B, H, n, n] and "cls_probs" [B, H, n]);
    ``tokens`` [B, n_out, D] the final layer-normed tokens; ``positions`` [B, n_out] their original token positions
    and ``fused`` [B, n_out] which of them are EViT's fused tokens (both None when no token was pruned).
    """

    connectivity: ConnectivityConfig | None  # None: no predictors (only the dense core; token pruning alone)
    num_layers: int
    num_special: int  # leading tokens that are never pruned: CLS (ViT), CLS and distillation (DeiT)
    max_tokens: int  # tokens of the unpruned sequence at the configured image size
    hidden_size: int
    linformer_len: int | None = None  # each layer's Linformer projection length; None: no projections
    core: str = "masked"
    keep_rate: float = 1.0
    with_predictor: bool = False
    record_probs: bool = False
    sparse_kernel: str = "auto"
    selection: str = "auto"  # the masked core's top-k selection (bab.sparsifiner.attention.SELECTIONS)
    token_keep: float | None = None
    prune_layers: tuple[int, ...] = ()
    fuse_tokens: bool = True
    token_hooks: bool = False  # whether the layers' pruning hooks are installed (once)
    layers: list = field(default_factory=list)
    tokens: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    fused: torch.Tensor | None = None

    def __post_init__(self):
        self.begin()

    def __getstate__(self) -> dict:
        # the last forward's records carry autograd graphs, which neither copy.deepcopy (a teacher) nor pickle can
        # take along; a copy starts with none, as after attaching
        return {**self.__dict__, "layers": [None] * self.num_layers, "tokens": None, "positions": None,
                "fused": None}

    def begin(self) -> None:
        """Forget the last forward (called by a pre-hook on the embeddings at the start of each forward)."""
        self.layers = [None] * self.num_layers
        self.tokens = self.positions = self.fused = None

    def prunes_after(self, layer: int) -> bool:
        return self.token_keep is not None and layer in self.prune_layers

    def _recorded(self, key: str, advice: str) -> list:
        if any(info is None for info in self.layers):
            raise RuntimeError("no forward recorded for every layer yet: run the model first")
        missing = [i for i, info in enumerate(self.layers) if key not in info]
        if missing:
            raise RuntimeError(f"layers {missing} recorded no {key!r}: {advice}")
        return [info[key] for info in self.layers]

    def approximate_attention(self, phase1: bool = True) -> list[torch.Tensor]:
        """The predictor's approximate attention per layer, [B, H, n_q, n] each, differentiable: what phase 1
        distils (S = A~_down W~_up, or A_down W_up with ``phase1_scores="raw"``), or S itself (``phase1=False``,
        phase 2's Eq. 10)."""
        return self._recorded("phase1_scores" if phase1 else "scores",
                              "configure(model, with_predictor=True) before the forward")

    def attention_probs(self) -> list[torch.Tensor]:
        """The attention probabilities per layer, [B, H, n, n] each (the teacher's, on a dense pass)."""
        return self._recorded("probs", "configure(model, record_probs=True) (or with_predictor=True with the "
                                       "dense core) before the forward; the fused core never forms them")

    def masks(self) -> list[torch.Tensor]:
        """The sparse connectivity mask per layer, bool [B, H, n, n]: row i keeps its k predicted keys (every key
        for the queries before ``first_query``, the CLS query with ``cls_dense``)."""
        indices = self._recorded("index", "run a predictor core (masked, sparse, fused) or with_predictor=True")
        return [connectivity_mask(index, info["n"], info["first_query"])
                for index, info in zip(indices, self.layers, strict=True)]

    def phase1_loss(self) -> torch.Tensor:
        """Sparsifiner's attention-distillation loss (Eq. 10) of the last forward, phase 1's: the MSE between each
        layer's approximate attention and its own attention rows of the predicted queries (all, or all but CLS with
        ``cls_dense``). Needs a dense forward with ``with_predictor=True`` (the teacher is the model's own dense
        attention)."""
        probs = self.attention_probs()
        rows = [p[:, :, info["first_query"]:] for p, info in zip(probs, self.layers, strict=True)]
        return attention_distillation_loss(self.approximate_attention(), rows)

    def mhsa_macs(self) -> float:
        """Multiply-adds of the attention cores (and predictors) per example in the last forward."""
        return float(sum(self._recorded("macs", "run a forward first")))

    def cost(self) -> float:
        """``mhsa_macs`` relative to dense attention over the unpruned sequence in every layer."""
        return self.mhsa_macs() / (self.num_layers * dense_attention_macs(self.max_tokens, self.hidden_size))


@dataclass(frozen=True)
class _LayerHandle:
    """What an attention module knows of its place: the shared state and its layer index (ViT's attention
    modules carry no ``layer_idx``)."""

    state: SparsifinerState
    layer: int


# ---------------------------------------------------------------------- attaching


def _base(model: nn.Module) -> nn.Module:
    """The ViTModel / DeiTModel inside ``model``, after checking it is one we support."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"attach supports transformers' ViT and DeiT models (model_type in {SUPPORTED_MODEL_TYPES}), "
                         f"got {type(model).__name__} with model_type {model_type!r}")
    base = getattr(model, "base_model", model)
    if not all(hasattr(base, name) for name in ("embeddings", "layers", "layernorm")):
        raise ValueError(f"cannot find the embeddings, layers and final layernorm of {type(model).__name__}")
    return base


def _attentions(model: nn.Module) -> list[nn.Module]:
    return [layer.attention for layer in _base(model).layers]


def is_attached(model: nn.Module) -> bool:
    return isinstance(getattr(model, STATE_ATTRIBUTE, None), SparsifinerState)


def sparsifiner_state(model: nn.Module) -> SparsifinerState:
    if not is_attached(model):
        raise ValueError("this model has no Sparsifiner attached; call bab.sparsifiner.attach.attach(model, ...)")
    return getattr(model, STATE_ATTRIBUTE)


def predictors(model: nn.Module) -> list[ConnectivityPredictor]:
    """Each layer's connectivity predictor, in order (empty when attached without predictors)."""
    return [getattr(a, PREDICTOR_NAME) for a in _attentions(model) if hasattr(a, PREDICTOR_NAME)]


def _connectivity(predictor_config) -> ConnectivityConfig | None:
    if predictor_config is None or isinstance(predictor_config, ConnectivityConfig):
        return predictor_config
    if isinstance(predictor_config, dict):
        return ConnectivityConfig(**predictor_config)
    raise TypeError(f"predictor_config must be a ConnectivityConfig, its fields as a dict, or None (no predictors), "
                    f"got {type(predictor_config).__name__}")


def attach(model: nn.Module, predictor_config: ConnectivityConfig | dict | None, core: str = "masked",
           keep: float = 1.0, linformer_len: int | None = None) -> nn.Module:
    """Give every layer of ``model`` (transformers' ViT or DeiT) a connectivity predictor built from
    ``predictor_config`` and route its attention through "bab_sparsifiner" with core ``core`` at keep rate
    ``keep`` (the fraction of keys each query keeps, in (0, 1]). Returns the same model.

    ``predictor_config=None`` attaches no predictors: only the dense core runs (token pruning alone, EViT). The
    predictors are built for the model's configured token count (patches plus CLS, plus the distillation token for
    DeiT), on the model's device and dtype, from torch's global random state. ``linformer_len``: also give every
    layer a Linformer projection of that length (core ``linformer``).
    """
    if is_attached(model):
        raise ValueError("Sparsifiner is already attached to this model")
    connectivity = _connectivity(predictor_config)
    base = _base(model)
    attentions = _attentions(model)
    max_tokens = base.embeddings.position_embeddings.shape[1]
    num_special = 2 if getattr(base.embeddings, "distillation_token", None) is not None else 1
    if linformer_len is not None and not (isinstance(linformer_len, int) and 1 <= linformer_len <= max_tokens):
        raise ValueError(f"linformer_len must be an int in 1..{max_tokens} (the model's tokens), got {linformer_len!r}")
    state = SparsifinerState(connectivity, len(attentions), num_special, max_tokens, model.config.hidden_size,
                             linformer_len)
    _validate(state, core, keep)  # before anything changes on the model
    reference = next(model.parameters())
    for i, attention in enumerate(attentions):
        for name in (PREDICTOR_NAME, LINFORMER_NAME):
            if hasattr(attention, name):
                raise ValueError(f"{type(attention).__name__} already has an attribute {name!r}")
        if connectivity is not None:
            predictor = connectivity.build(attention.num_attention_heads, max_tokens, head_dim=attention.head_dim)
            attention.add_module(PREDICTOR_NAME, predictor.to(device=reference.device, dtype=reference.dtype))
        if linformer_len is not None:
            projection = LinformerProjection(max_tokens, linformer_len)
            attention.add_module(LINFORMER_NAME, projection.to(device=reference.device, dtype=reference.dtype))
        object.__setattr__(attention, STATE_ATTRIBUTE, _LayerHandle(state, i))  # plain attribute, not state_dict
    # the state is per forward: the embeddings start one, the final layernorm gives the tokens it returns. The hooks
    # find the state on their module, not in a closure, so a deepcopy of the model (a teacher) gets its own state
    for module in (model, base.embeddings, base.layernorm):
        object.__setattr__(module, STATE_ATTRIBUTE, state)
    base.embeddings.register_forward_pre_hook(_begin_forward)
    base.layernorm.register_forward_hook(_keep_tokens)
    setattr(model.config, CONFIG_KEY, {"connectivity": None if connectivity is None else asdict(connectivity),
                                       "linformer_len": linformer_len})
    configure(model, core=core, keep=keep)
    _register()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        raise RuntimeError(f"{type(model).__name__} refused the attention implementation {ATTN_IMPLEMENTATION!r}")
    return model


def _validate(state: SparsifinerState, core: str, keep, with_predictor: bool = False) -> float:
    """Raise, saying how to fix it, where ``core`` / ``keep`` / ``with_predictor`` do not fit the model or the
    token pruning set on it; return the keep rate as a float."""
    if core not in CORES:
        raise ValueError(f"core must be one of {CORES}, got {core!r}")
    keep = validate_keep_rate(keep)
    if state.connectivity is None and (core in PREDICTOR_CORES or with_predictor):
        raise ValueError(f"core={core!r} and with_predictor need connectivity predictors, and this model was attached "
                         f"with predictor_config=None: attach with a ConnectivityConfig, or use core='dense'")
    if core == "linformer" and state.linformer_len is None:
        raise ValueError("core='linformer' needs Linformer projections: attach with linformer_len=<projection "
                         "length>")
    if core == "fused" and with_predictor:
        raise ValueError("with_predictor trains the predictor on its dense scores, and the fused kernel is for "
                         "inference: use core='dense' with with_predictor=True")
    if core in ("fused", "linformer") and state.token_keep is not None:
        raise ValueError(f"token pruning needs each pruning layer's CLS attention row, which core={core!r} never "
                         "forms: prune tokens with core='dense', 'masked' or 'sparse'")
    return keep


def configure(model: nn.Module, *, core: str | None = None, keep: float | None = None,
              with_predictor: bool | None = None, record_probs: bool | None = None,
              sparse_kernel: str | None = None, selection: str | None = None) -> SparsifinerState:
    """Change the settings of the next forwards (None: unchanged), all checked before any is applied. Returns the
    state."""
    state = sparsifiner_state(model)
    core = state.core if core is None else core
    with_predictor = state.with_predictor if with_predictor is None else with_predictor
    for name, flag in (("with_predictor", with_predictor), ("record_probs", record_probs)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    keep = _validate(state, core, state.keep_rate if keep is None else keep, with_predictor)
    if sparse_kernel is not None and sparse_kernel not in SPARSE_KERNELS:
        raise ValueError(f"sparse_kernel must be one of {SPARSE_KERNELS}, got {sparse_kernel!r}")
    if selection is not None and selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    state.core, state.keep_rate, state.with_predictor = core, keep, with_predictor
    if record_probs is not None:
        state.record_probs = record_probs
    if sparse_kernel is not None:
        state.sparse_kernel = sparse_kernel
    if selection is not None:
        state.selection = selection
    return state


def load_attached(model_class, path: str, core: str = "masked", keep: float = 1.0,
                  **from_pretrained_kwargs) -> nn.Module:
    """Reload what ``save_pretrained`` wrote for an attached model: the transformers model, attached again with the
    predictor settings kept in its config, and the predictors' weights from the checkpoint's safetensors files
    (``from_pretrained`` itself skips them: the plain class has no such parameters)."""
    from safetensors.torch import load_file
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.utils import logging as hf_logging

    # the plain class has no predictor parameters, so from_pretrained reports their weights as unexpected keys:
    # true of it, misleading here, where they are read just below
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model = model_class.from_pretrained(path, **from_pretrained_kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    stored = getattr(model.config, CONFIG_KEY, None)
    if stored is None:
        raise ValueError(f"{path} holds no {CONFIG_KEY!r} in its config: it was not saved from an attached model")
    attach(model, stored["connectivity"], core=core, keep=keep, linformer_len=stored.get("linformer_len"))
    # save_pretrained writes some models' weights under their older names (ViT, DeiT: vit.encoder.layer.0...);
    # the function it renames them with gives each predictor weight's name in the files
    markers = (f".{PREDICTOR_NAME}.", f".{LINFORMER_NAME}.")
    expected = {k: v for k, v in model.state_dict().items() if any(m in k for m in markers)}
    saved_name = {next(iter(revert_weight_conversion(model, {k: v}))): k for k, v in expected.items()}
    weights = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        weights.update({saved_name.get(k, k): v for k, v in load_file(file).items() if any(m in k for m in markers)})
    if set(weights) != set(expected):
        raise ValueError(f"{path}: predictor weights missing {sorted(set(expected) - set(weights))}, "
                         f"unexpected {sorted(set(weights) - set(expected))}")
    model.load_state_dict(weights, strict=False)
    return model


# ---------------------------------------------------------------------- the attention implementation


def sparsifiner_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The "bab_sparsifiner" attention: query, key, value [B, H, n, d] -> (output [B, n, H, d], probabilities
    [B, H, n, n] where the core computed them, else None), by the state's core (``bab.sparsifiner.attention``)."""
    handle = getattr(module, STATE_ATTRIBUTE, None)
    if not isinstance(handle, _LayerHandle):
        raise RuntimeError(f"the {ATTN_IMPLEMENTATION!r} attention runs on modules prepared by "
                           f"bab.sparsifiner.attach.attach; {type(module).__name__} was not")
    state, layer = handle.state, handle.layer
    if attention_mask is not None:
        raise ValueError(f"the {ATTN_IMPLEMENTATION!r} attention takes no attention mask (every image token attends "
                         "to every other one before the predictor's selection); call the model without one")
    if dropout:
        raise ValueError(f"the {ATTN_IMPLEMENTATION!r} attention has no attention dropout (bab's ViT and DeiT use "
                         f"none): set config.attention_probs_dropout_prob = 0.0, got {dropout}")
    if state.layers[layer] is not None:
        # a second call in one forward is gradient checkpointing recomputing the layer in the backward pass, after
        # the state has moved on (token positions of later layers): it would select other keys than the forward did
        raise RuntimeError(f"layer {layer} ran twice in one forward; gradient checkpointing recomputes layers, which "
                           f"the {ATTN_IMPLEMENTATION!r} attention cannot follow: call "
                           f"model.activation_checkpointing_disable()")
    predictor = getattr(module, PREDICTOR_NAME, None)
    if predictor is not None and query.shape[-2] > state.max_tokens:
        raise ValueError(f"{query.shape[-2]} tokens, but the predictors were built for at most {state.max_tokens} "
                         f"(the configured image size); interpolate_pos_encoding to larger images is not supported")
    d = query.shape[-1]
    if scaling is not None and not math.isclose(scaling, d ** -0.5, rel_tol=1e-6):
        raise ValueError(f"bab's attention cores scale the scores by 1/sqrt(head_dim) = {d ** -0.5}, but the model "
                         f"asks for {scaling}")
    inputs = CoreInputs(predictor=predictor, linformer=getattr(module, LINFORMER_NAME, None), keep_rate=state.keep_rate,
                        positions=state.positions, need_probs=state.record_probs or state.prunes_after(layer),
                        with_predictor=state.with_predictor, sparse_kernel=state.sparse_kernel,
                        selection=state.selection)
    out, info = attention_core(state.core)(query, key, value, inputs)  # out [B, H, n, d]
    info.update(n=query.shape[-2], positions=state.positions)
    if "probs" in info:
        info["cls_probs"] = info["probs"][:, :, 0]  # [B, H, n]: what token pruning ranks the patches by
    state.layers[layer] = info
    return out.transpose(1, 2).contiguous(), info.get("probs")


def _begin_forward(module: nn.Module, args: tuple) -> None:
    getattr(module, STATE_ATTRIBUTE).begin()


def _keep_tokens(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
    getattr(module, STATE_ATTRIBUTE).tokens = out  # [B, n_out, D]


def _register() -> None:
    AttentionInterface.register(ATTN_IMPLEMENTATION, sparsifiner_attention)
