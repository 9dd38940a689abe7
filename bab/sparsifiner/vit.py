"""Notebook 05's ViT: transformers' ``ViTForImageClassification`` with Sparsifiner attached, and one forward's options.

``build_vit(ViTClassifierConfig(...))`` builds transformers' ViT of that shape (a DeiT-tiny-like one, trained from
scratch offline) with Sparsifiner attached (``bab.sparsifiner.attach``), so every model of the notebook runs the
"bab_sparsifiner" attention implementation, whose cores are chosen by name (``dense`` is SDPA, what the plain model
runs): with a ``connectivity`` config every layer gets a connectivity predictor, with ``linformer_len`` a Linformer
projection. EViT-style token pruning between layers (``bab.sparsifiner.attach_tokens``) is set per forward.

``vit_forward(model, pixels, ViTForward(attention="masked", keep_rate=0.25))`` (or the options' fields as keywords)
sets the settings of that forward, runs the model's own forward and returns a ``ViTOutput``: the logits, the final
tokens, the attention cores' multiply-adds per example (the paper's "MHSA FLOPs", counted from the shapes that ran)
and every layer's internals. Any transformers ViT or DeiT with Sparsifiner attached works, a pretrained one too.

Budgeted head gates are the heads method's own (``bab.heads.attach``, trained by ``bab.heads.train`` through
``bab.heads.hf_encoder.GatedHFClassifier``, which takes a ViT as it takes a BERT); they compose with Sparsifiner
because they act on the attention output projection, whatever implementation computed the heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn
from transformers import ViTConfig, ViTForImageClassification

from bab.sparsifiner import attach as sparsifiner_attach
from bab.sparsifiner.attach_tokens import set_token_pruning, validate_token_keep
from bab.sparsifiner.attention import CORES_WITHOUT_PROBS, PREDICTOR_CORES, SELECTIONS, attention_core
from bab.sparsifiner.kernels import SPARSE_KERNELS, dense_attention_macs
from bab.sparsifiner.predictor import ConnectivityConfig, validate_keep_rate

__all__ = ["LINFORMER_MODULE", "PREDICTOR_MODULE", "ViTClassifierConfig", "ViTForward", "ViTOutput", "build_vit",
           "dense_mhsa_macs", "num_tokens", "vit_forward"]

# The attached modules' names, as they appear in a state-dict key (which weights a training objective updates)
PREDICTOR_MODULE = sparsifiner_attach.PREDICTOR_NAME
LINFORMER_MODULE = sparsifiner_attach.LINFORMER_NAME


@dataclass(frozen=True)
class ViTClassifierConfig:
    image_size: int = 28
    patch_size: int = 4
    num_channels: int = 1
    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 128
    num_classes: int = 10
    dropout: float = 0.0
    connectivity: ConnectivityConfig | None = None  # a Sparsifiner connectivity predictor in every layer; None: none
    linformer_len: int | None = None  # attach Linformer projections of this length to every layer

    def __post_init__(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} must be a multiple of patch_size {self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.connectivity is not None and not isinstance(self.connectivity, ConnectivityConfig):
            raise TypeError(f"connectivity must be a ConnectivityConfig (e.g. ConnectivityConfig(n_down=8)) or None, "
                            f"got {self.connectivity!r}")
        if self.predictor and self.connectivity.connectivity_projections and self.hidden_size // self.num_heads < 2:
            raise ValueError(f"connectivity_projections map each head's width d to d // 2, so they need d >= 2; "
                             f"hidden_size {self.hidden_size} / num_heads {self.num_heads} gives "
                             f"{self.hidden_size // self.num_heads}: widen the model or turn them off")

    @property
    def predictor(self) -> bool:
        """Whether every layer gets a connectivity predictor."""
        return self.connectivity is not None

    @property
    def num_tokens(self) -> int:
        """Patches plus the CLS token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def hf_config(self) -> ViTConfig:
        """transformers' config of this shape (DeiT's layer-norm epsilon, no attention dropout)."""
        return ViTConfig(
            hidden_size=self.hidden_size, num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size, image_size=self.image_size, patch_size=self.patch_size,
            num_channels=self.num_channels, num_labels=self.num_classes, hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=0.0, qkv_bias=True, layer_norm_eps=1e-6,  # DeiT's epsilon
        )


@dataclass(frozen=True)
class ViTForward:
    """The options of one ``vit_forward``, checked here: on their own when built, against the model by
    ``check_model``.

    attention: the attention core's name (``bab.sparsifiner.attention.ATTENTION_CORES``); keep_rate:
    Sparsifiner's fraction of connections per query (sparse / masked / fused); token_keep + prune_layers: EViT
    pruning after those layers (0-based); with_predictor: also compute the predictor's scores (Sparsifiner phase 1,
    on a dense pass); sparse_kernel: the sparse core's "auto", "csr" or "gather"
    (``bab.sparsifiner.kernels.sparse_attention``); selection: the masked core's top-k selection, "auto" (the
    fused kernel's where built: the same sets) or "torch" (``bab.sparsifiner.attention.SELECTIONS``);
    return_internals: every layer's attention probabilities too.
    """

    attention: str = "dense"
    keep_rate: float = 1.0
    token_keep: float | None = None
    prune_layers: tuple[int, ...] = ()
    with_predictor: bool = False
    sparse_kernel: str = "auto"
    selection: str = "auto"
    return_internals: bool = False

    def __post_init__(self):
        attention_core(self.attention)  # an unknown name raises, listing the known ones
        object.__setattr__(self, "keep_rate", validate_keep_rate(self.keep_rate))
        if self.token_keep is not None:
            object.__setattr__(self, "token_keep", validate_token_keep(self.token_keep))
        object.__setattr__(self, "prune_layers", tuple(self.prune_layers))
        if self.sparse_kernel not in SPARSE_KERNELS:
            raise ValueError(f"sparse_kernel must be one of {SPARSE_KERNELS}, got {self.sparse_kernel!r}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        if self.attention in CORES_WITHOUT_PROBS and self.prunes_tokens:
            raise ValueError(f"token pruning needs a full CLS attention row, which attention={self.attention!r} "
                             f"does not compute: prune tokens with attention='dense', 'sparse' or 'masked'")
        if self.attention == "fused" and self.with_predictor:
            raise ValueError("with_predictor trains the predictor on its dense scores, and the fused kernel is for "
                             "inference: use attention='dense' with with_predictor=True")

    @classmethod
    def of(cls, options: ViTForward | None = None, **keywords) -> ViTForward:
        """``options`` with the given fields replaced, or the options built from ``keywords`` alone."""
        if options is None:
            return cls(**keywords)
        if not isinstance(options, cls):
            raise TypeError(f"the forward's options must be a ViTForward, got {type(options).__name__}: pass e.g. "
                            f"ViTForward(attention='masked'), or the fields as keywords (attention='masked')")
        return replace(options, **keywords) if keywords else options

    @property
    def prunes_tokens(self) -> bool:
        return self.token_keep is not None and len(self.prune_layers) > 0

    def check_model(self, model: nn.Module) -> None:
        """Raise an error that says how to build the model when it lacks what these options use."""
        state = sparsifiner_attach.sparsifiner_state(model)
        if self.attention in PREDICTOR_CORES and state.connectivity is None:
            raise ValueError(f"attention={self.attention!r} needs connectivity predictors: "
                             "build the model with ViTClassifierConfig(connectivity=ConnectivityConfig(...))")
        if self.attention == "linformer" and state.linformer_len is None:
            raise ValueError("attention='linformer' needs ViTClassifierConfig(linformer_len=<projection length>)")
        if self.token_keep is not None:
            bad = [i for i in self.prune_layers if not 0 <= i < state.num_layers]
            if bad:
                raise ValueError(f"prune_layers {bad} outside 0..{state.num_layers - 1}")


@dataclass
class ViTOutput:
    logits: torch.Tensor  # [B, num_classes]
    tokens: torch.Tensor  # [B, n_last, D] final tokens after the last layer norm (for token distillation)
    mhsa_macs: float  # multiply-adds of the attention cores, per example (see module doc)
    cost: float  # mhsa_macs / the dense model's
    layers: list[dict] = field(default_factory=list)  # each layer's internals (bab.sparsifiner.attach's state)
    positions: torch.Tensor | None = None  # [B, n_last] original positions of the final tokens; None: unpruned


def build_vit(config: ViTClassifierConfig) -> ViTForImageClassification:
    """transformers' ViT of ``config``'s shape (random initialisation) with Sparsifiner attached: predictors where
    ``config.connectivity``, Linformer projections where ``config.linformer_len``, and the dense core (SDPA) set."""
    model = ViTForImageClassification(config.hf_config())
    return sparsifiner_attach.attach(model, config.connectivity, core="dense", linformer_len=config.linformer_len)


def num_tokens(model: nn.Module) -> int:
    """Tokens of the unpruned sequence (patches and CLS) at the model's image size."""
    return sparsifiner_attach.sparsifiner_state(model).max_tokens


def dense_mhsa_macs(model: nn.Module) -> float:
    """Multiply-adds per example of dense attention over the unpruned sequence in every layer."""
    state = sparsifiner_attach.sparsifiner_state(model)
    return state.num_layers * dense_attention_macs(state.max_tokens, state.hidden_size)


def vit_forward(model: nn.Module, pixel_values: torch.Tensor, options: ViTForward | None = None,
                **keywords) -> ViTOutput:
    """pixel_values [B, C, H, W] -> ViTOutput, with the options ``options`` (a ``ViTForward``; default: dense,
    nothing on) and any of its fields given as ``keywords`` (they replace the options' values):
    ``vit_forward(model, x, ViTForward(attention="sparse", keep_rate=0.25))`` is ``vit_forward(model, x,
    attention="sparse", keep_rate=0.25)``.

    ``model`` may be wrapped for training in parallel (accelerate, DDP): the settings go to the model inside, the
    forward through the wrapper, so gradients are synchronised."""
    options = ViTForward.of(options, **keywords)
    inner = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    options.check_model(inner)
    state = sparsifiner_attach.sparsifiner_state(inner)
    set_token_pruning(inner, None)  # before the core changes: pruning refuses cores without a CLS row
    sparsifiner_attach.configure(inner, core=options.attention, keep=options.keep_rate,
                                 with_predictor=options.with_predictor, record_probs=options.return_internals,
                                 sparse_kernel=options.sparse_kernel, selection=options.selection)
    if options.prunes_tokens:
        set_token_pruning(inner, options.token_keep, options.prune_layers, fuse=False)  # bab's rule: no fused token
    logits = model(pixel_values=pixel_values).logits
    macs = state.mhsa_macs()
    return ViTOutput(logits, state.tokens, macs, macs / dense_mhsa_macs(inner), list(state.layers), state.positions)
