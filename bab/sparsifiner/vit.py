"""A ViT image classifier on transformers' ``ViTForImageClassification``, with our attention paths.

The weights live in an unmodified ``ViTForImageClassification`` (``self.hf``), so a ViT or DeiT
checkpoint loads when online (``ViTClassifier.from_pretrained("facebook/deit-tiny-patch16-224")``);
offline we train a small DeiT-tiny-like shape from scratch. The forward pass is ours: it runs the HF
embeddings, each ``ViTLayer``'s layer norms, q/k/v/o projections and MLP, and swaps only the
attention core (softmax(QK^T/sqrt(d)) V) for one chosen by name from ``bab.sparsifiner.attention``:
``dense`` (``F.scaled_dot_product_attention``, what HF's SDPA path runs; equal to HF when nothing is on),
``sparse``, ``masked`` or ``fused`` (Sparsifiner's connections by three kernels) or ``linformer``.

Two other knobs share the same forward: budgeted head gates (``bab.core.budget``; soft gate mass or hard
top-k heads at a requested budget) and EViT-style token pruning at fixed layers. The options of one forward
are one ``ViTForward``: ``model(pixels, ViTForward(attention="masked", keep_rate=0.25))``, or its fields as
keywords, ``model(pixels, attention="masked", keep_rate=0.25)``. Every forward also returns the attention
core's multiply-adds per example (the paper's "MHSA FLOPs"), counted from the shapes it actually ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import torch
from torch import nn
from transformers import ViTConfig, ViTForImageClassification

from bab.core.budget import BudgetGates, hard_topk_mask, head_weights, validate_budget
from bab.sparsifiner.attention import CORES_WITHOUT_PROBS, PREDICTOR_CORES, CoreInputs, attention_core
from bab.sparsifiner.linformer import LinformerProjection
from bab.sparsifiner.predictor import (
    SPARSE_KERNELS,
    ConnectivityConfig,
    dense_attention_macs,
    validate_keep_rate,
    without_later_defaults,
)
from bab.sparsifiner.token_pruning import prune_tokens, validate_token_keep

HEAD_MODES = ("soft", "hard")


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
    predictor: bool = False  # attach a Sparsifiner connectivity predictor to every layer
    n_down: int = 8
    tau: float = 0.05
    up_prune: float = 1e-2
    # the official code's choices as options (bab.sparsifiner.predictor; docs/sparsifiner.md). The defaults are
    # the paper's text and this code's behaviour before the options existed, until training measurements decide.
    cls_dense: bool = False  # True: no prediction for the CLS query, it attends to every key (official)
    coefficients: str = "threshold"  # "threshold": A_down > tau (Eq. 2); "topm": the top_m largest (official)
    top_m: int = 8  # coefficients kept per query with coefficients="topm" (official default 8)
    basis_threshold_abs: bool = False  # True: basis |W_up| * 1[|W_up| >= up_prune] (official), else W_up * 1[...]
    predictor_scale: str = "head_dim"  # A_down's logits times 1/sqrt(d) ("head_dim") or 1/sqrt(H) ("num_heads")
    basis: str = "per_head"  # one W_down / W_up per head, or "shared" by the heads of a layer (official)
    connectivity_projections: bool = False  # learned d -> d/2 maps of q and k before A_down (official)
    phase1_scores: str = "sparse"  # phase 1 distils A~_down W~_up, or "raw" A_down W_up (official)
    linformer_len: int | None = None  # attach Linformer projections of this length to every layer
    gates: str | None = None  # None or "budget" (BudgetGates over layers x heads)

    def __post_init__(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} must be a multiple of patch_size {self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.gates not in (None, "budget"):
            raise ValueError(f"gates must be None or 'budget', got {self.gates!r}")
        connectivity = self.connectivity()  # validates the predictor fields
        if connectivity.connectivity_projections and self.hidden_size // self.num_heads < 2:
            raise ValueError(f"connectivity_projections map each head's width d to d // 2, so they need d >= 2; "
                             f"hidden_size {self.hidden_size} / num_heads {self.num_heads} gives "
                             f"{self.hidden_size // self.num_heads}: widen the model or turn them off")

    def predictor_options(self) -> dict:
        """The ConnectivityPredictor keyword arguments besides num_heads, max_tokens, tau and up_prune."""
        return dict(n_down=self.n_down, cls_dense=self.cls_dense, coefficients=self.coefficients, top_m=self.top_m,
                    basis_threshold_abs=self.basis_threshold_abs, predictor_scale=self.predictor_scale,
                    basis=self.basis, connectivity_projections=self.connectivity_projections,
                    phase1_scores=self.phase1_scores)

    def connectivity(self) -> ConnectivityConfig:
        """The predictor fields as a ``ConnectivityConfig`` (each layer's predictor is built from it). The other way
        round: ``ViTClassifierConfig(..., predictor=True, **ConnectivityConfig.official(n_down=8).to_dict())``."""
        return ConnectivityConfig(tau=self.tau, up_prune=self.up_prune, **self.predictor_options())

    @property
    def num_tokens(self) -> int:
        """Patches plus the CLS token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def to_dict(self) -> dict:
        """The fields (the run cache's key of a ViT), without the predictor options added later when they hold
        their defaults (``bab.sparsifiner.predictor.LATER_OPTION_DEFAULTS``), so default configs keep their keys."""
        return without_later_defaults(asdict(self))

    def hf_config(self) -> ViTConfig:
        return ViTConfig(
            hidden_size=self.hidden_size, num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size, image_size=self.image_size, patch_size=self.patch_size,
            num_channels=self.num_channels, num_labels=self.num_classes, hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=0.0, qkv_bias=True, layer_norm_eps=1e-6,  # DeiT's epsilon
        )


@dataclass(frozen=True, eq=False)  # eq=False: a head_mask tensor has no single truth value to compare by
class ViTForward:
    """The options of one ``ViTClassifier`` forward, checked here: on their own when built, against the model
    by ``check_model``.

    attention: the attention core's name (``bab.sparsifiner.attention.ATTENTION_CORES``); keep_rate:
    Sparsifiner's fraction of connections per query (sparse / masked / fused); budget + head_mode: head gates
    (soft gate mass or hard top-k heads); head_mask: an explicit binary [L, H] mask instead of the top-k (hard
    mode, no gates needed); token_keep + prune_layers: EViT pruning after the attention of those layers
    (0-based); with_predictor: also compute the predictor's scores (Sparsifiner phase 1, on a dense pass);
    sparse_kernel: the sparse core's "auto", "csr" or "gather" (``bab.sparsifiner.predictor.sparse_attention``);
    return_internals: every layer's internals (probabilities, connections) in ``ViTOutput.layers``.
    """

    attention: str = "dense"
    keep_rate: float = 1.0
    budget: float | None = None
    head_mode: str = "soft"
    head_mask: torch.Tensor | None = None
    token_keep: float | None = None
    prune_layers: tuple[int, ...] = ()
    with_predictor: bool = False
    sparse_kernel: str = "auto"
    return_internals: bool = False

    def __post_init__(self):
        attention_core(self.attention)  # an unknown name raises, listing the known ones
        object.__setattr__(self, "keep_rate", validate_keep_rate(self.keep_rate))
        if self.budget is not None:
            object.__setattr__(self, "budget", validate_budget(self.budget))
        if self.head_mode not in HEAD_MODES:
            raise ValueError(f"head_mode must be one of {HEAD_MODES}, got {self.head_mode!r}")
        if self.head_mask is not None and self.head_mode != "hard":
            raise ValueError("head_mask is a hard mask: pass head_mode='hard' with it")
        if self.token_keep is not None:
            object.__setattr__(self, "token_keep", validate_token_keep(self.token_keep))
        object.__setattr__(self, "prune_layers", tuple(self.prune_layers))
        if self.sparse_kernel not in SPARSE_KERNELS:
            raise ValueError(f"sparse_kernel must be one of {SPARSE_KERNELS}, got {self.sparse_kernel!r}")
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

    def prunes_after(self, layer: int) -> bool:
        """Whether tokens are pruned after the attention of ``layer`` (0-based)."""
        return self.token_keep is not None and layer in self.prune_layers

    def check_model(self, config: ViTClassifierConfig) -> None:
        """Raise an error that says how to build the model when it lacks what these options use."""
        if self.attention in PREDICTOR_CORES and not config.predictor:
            raise ValueError(f"attention={self.attention!r} needs connectivity predictors: "
                             "build the model with ViTClassifierConfig(predictor=True)")
        if self.attention == "linformer" and not config.linformer_len:
            raise ValueError("attention='linformer' needs ViTClassifierConfig(linformer_len=<projection length>)")
        if self.budget is not None and self.head_mask is None and config.gates is None:
            raise ValueError("budget= needs head gates: build the model with ViTClassifierConfig(gates='budget')")
        if self.token_keep is not None:
            bad = [i for i in self.prune_layers if not 0 <= i < config.num_layers]
            if bad:
                raise ValueError(f"prune_layers {bad} outside 0..{config.num_layers - 1}")


@dataclass
class ViTOutput:
    logits: torch.Tensor  # [B, num_classes]
    tokens: torch.Tensor  # [B, n_last, D] final tokens after the last layer norm (for token distillation)
    mhsa_macs: float  # multiply-adds of the attention cores, per example (see module doc)
    cost: float  # mhsa_macs / the dense model's
    layers: list[dict] = field(default_factory=list)  # per layer internals when return_internals=True


class ViTClassifier(nn.Module):
    def __init__(self, config: ViTClassifierConfig, hf_model: ViTForImageClassification | None = None):
        super().__init__()
        self.config = config
        self.hf = hf_model if hf_model is not None else ViTForImageClassification(config.hf_config())
        n, L, H = config.num_tokens, config.num_layers, config.num_heads
        connectivity = config.connectivity()
        self.predictors = (nn.ModuleList([connectivity.build(H, n, head_dim=config.hidden_size // H)
                                          for _ in range(L)])
                           if config.predictor else None)
        self.linformer = (nn.ModuleList([LinformerProjection(n, config.linformer_len) for _ in range(L)])
                          if config.linformer_len else None)
        # gates start nearly open (sigmoid(2) = 0.88) so a dense warm start keeps its function at first
        self.gates = BudgetGates(L, H, init_logit=2.0) if config.gates == "budget" else None

    @classmethod
    def from_pretrained(cls, name_or_path: str, **config_overrides) -> ViTClassifier:
        """A ViT/DeiT checkpoint from the Hugging Face hub (online users), with our attention paths attached."""
        hf = ViTForImageClassification.from_pretrained(name_or_path, attn_implementation="sdpa")
        c = hf.config
        size = c.image_size if isinstance(c.image_size, int) else c.image_size[0]
        patch = c.patch_size if isinstance(c.patch_size, int) else c.patch_size[0]
        config = ViTClassifierConfig(image_size=size, patch_size=patch, num_channels=c.num_channels,
                                     hidden_size=c.hidden_size, num_layers=c.num_hidden_layers,
                                     num_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
                                     num_classes=c.num_labels, **config_overrides)
        return cls(config, hf_model=hf)

    @property
    def layers(self):
        return self.hf.vit.layers

    def head_mask_for(self, budget: float) -> torch.Tensor:
        """Hard top-k head mask [L, H] at ``budget`` (keeps ceil(b * L * H) heads)."""
        if self.gates is None:
            raise ValueError("this ViT has no head gates; build it with ViTClassifierConfig(gates='budget')")
        return hard_topk_mask(self.gates(budget).detach(), budget)

    def dense_mhsa_macs(self) -> float:
        c = self.config
        return c.num_layers * dense_attention_macs(c.num_tokens, c.hidden_size)

    def forward(self, pixel_values: torch.Tensor, options: ViTForward | None = None, **keywords) -> ViTOutput:
        """pixel_values [B, C, H, W] -> ViTOutput, with the options ``options`` (a ``ViTForward``; default: dense,
        nothing on) and any of its fields given as ``keywords`` (they replace the options' values):
        ``model(x, ViTForward(attention="sparse", keep_rate=0.25))`` is ``model(x, attention="sparse",
        keep_rate=0.25)``."""
        options = ViTForward.of(options, **keywords)
        options.check_model(self.config)
        weights = self._head_weights(options)  # [L, H] or None

        x = self.hf.vit.embeddings(pixel_values)  # [B, n, D]
        B = x.shape[0]
        positions = None  # [B, n] original token positions once tokens have been pruned
        total_macs, internals = 0.0, []
        for i, layer in enumerate(self.layers):
            h = layer.layernorm_before(x)
            prune_here = options.prunes_after(i)
            out, info = self._attention_core(i, layer.attention, h, options, positions,
                                             need_probs=options.return_internals or prune_here)
            if weights is not None:
                out = out * weights[i].view(1, -1, 1, 1)
                if options.head_mode == "hard":  # skipped heads cost nothing
                    info["macs"] *= float(weights[i].detach().gt(0).float().mean())
            total_macs += info["macs"]
            out = layer.attention.o_proj(out.transpose(1, 2).reshape(B, x.shape[1], -1))
            x = x + layer.dropout(out)
            x = x + layer.dropout(layer.mlp(layer.layernorm_after(x)))
            if prune_here:
                x, kept = prune_tokens(x, info["cls_probs"], options.token_keep)
                base = positions if positions is not None else torch.arange(info["n"]).expand(B, -1)
                positions = torch.cat([base[:, :1], torch.gather(base, 1, kept)], dim=1)
            if options.return_internals or options.with_predictor:
                internals.append(info)
        tokens = self.hf.vit.layernorm(x)
        logits = self.hf.classifier(tokens[:, 0])
        return ViTOutput(logits, tokens, total_macs, total_macs / self.dense_mhsa_macs(), internals)

    def _head_weights(self, options: ViTForward):
        """[L, H] weights on the heads' outputs, or None: the soft gates, the hard top-k mask (straight-through
        to the gates), or an explicit binary ``head_mask`` (hard mode, no gates needed)."""
        if options.budget is None and options.head_mask is None:
            return None
        c = self.config
        return head_weights(self.gates, options.budget, options.head_mode, options.head_mask,
                            (c.num_layers, c.num_heads), self.hf.classifier.weight.dtype)[0]

    def _attention_core(self, i, attn, h, options: ViTForward, positions, need_probs):
        """h [B, n, D] -> (per-head outputs [B, H, n, d], info dict with macs and, if asked, probabilities) from
        layer ``i``'s core ``options.attention``."""
        B, n, _ = h.shape
        H = self.config.num_heads
        q, k, v = (proj(h).view(B, n, H, -1).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        layer = CoreInputs(predictor=self.predictors[i] if self.predictors is not None else None,
                           linformer=self.linformer[i] if self.linformer is not None else None,
                           keep_rate=options.keep_rate, positions=positions, need_probs=need_probs,
                           with_predictor=options.with_predictor, sparse_kernel=options.sparse_kernel)
        out, core_info = attention_core(options.attention)(q, k, v, layer)
        info = {"n": n, "positions": positions, **core_info}
        if "probs" in info:
            info["cls_probs"] = info["probs"][:, :, 0]  # [B, H, n]
        return out, info
