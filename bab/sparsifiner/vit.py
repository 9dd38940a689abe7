"""A ViT image classifier on transformers' ``ViTForImageClassification``, with our attention paths.

The weights live in an unmodified ``ViTForImageClassification`` (``self.hf``), so a ViT or DeiT
checkpoint loads when online (``ViTClassifier.from_pretrained("facebook/deit-tiny-patch16-224")``);
offline we train a small DeiT-tiny-like shape from scratch. The forward pass is ours: it runs the HF
embeddings, each ``ViTLayer``'s layer norms, q/k/v/o projections and MLP, and swaps only the
attention core (softmax(QK^T/sqrt(d)) V) for one of

- ``dense``: ``F.scaled_dot_product_attention`` (what HF's SDPA path runs; equal to HF when nothing is on);
- ``sparse``: Sparsifiner over the k = ceil(keep_rate * n) predicted keys per query only (CSR kernel at
  inference, a gather when training; ``bab.sparsifiner.predictor.sparse_attention``);
- ``masked``: Sparsifiner's reference, dense scores masked to the same connections;
- ``linformer``: low-rank attention over ``linformer_len`` projected keys/values.

Two other knobs share the same forward: budgeted head gates (``bab.core.budget``; soft gate mass or hard
top-k heads at a requested budget) and EViT-style token pruning at fixed layers. Every forward
also returns the attention core's multiply-adds per example (the paper's "MHSA FLOPs"), counted
from the shapes it actually ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ViTConfig, ViTForImageClassification

from bab.core.budget import BudgetGates, hard_topk_mask, head_weights
from bab.sparsifiner.linformer import LinformerProjection, linformer_macs
from bab.sparsifiner.predictor import (
    ConnectivityPredictor,
    attention_over_connections,
    connectivity_mask,
    dense_attention,
    dense_attention_macs,
    masked_dense_attention,
    num_connections,
    predictor_macs,
    sparse_attention_macs,
    validate_keep_rate,
    validate_predictor_options,
)
from bab.sparsifiner.token_pruning import prune_tokens, validate_token_keep

ATTENTION_PATHS = ("dense", "sparse", "masked", "linformer")
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
    linformer_len: int | None = None  # attach Linformer projections of this length to every layer
    gates: str | None = None  # None or "budget" (BudgetGates over layers x heads)

    def __post_init__(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} must be a multiple of patch_size {self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.gates not in (None, "budget"):
            raise ValueError(f"gates must be None or 'budget', got {self.gates!r}")
        validate_predictor_options(**self.predictor_options(), tau=self.tau, up_prune=self.up_prune)

    def predictor_options(self) -> dict:
        """The ConnectivityPredictor keyword arguments besides num_heads, max_tokens, tau and up_prune."""
        return dict(n_down=self.n_down, cls_dense=self.cls_dense, coefficients=self.coefficients, top_m=self.top_m,
                    basis_threshold_abs=self.basis_threshold_abs, predictor_scale=self.predictor_scale)

    @property
    def num_tokens(self) -> int:
        """Patches plus the CLS token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def to_dict(self) -> dict:
        return asdict(self)

    def hf_config(self) -> ViTConfig:
        return ViTConfig(
            hidden_size=self.hidden_size, num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size, image_size=self.image_size, patch_size=self.patch_size,
            num_channels=self.num_channels, num_labels=self.num_classes, hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=0.0, qkv_bias=True, layer_norm_eps=1e-6,  # DeiT's epsilon
        )


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
        self.predictors = (nn.ModuleList([ConnectivityPredictor(H, n, tau=config.tau, up_prune=config.up_prune,
                                                                **config.predictor_options()) for _ in range(L)])
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

    def backbone_parameters(self):
        """Everything but the predictors (the frozen part of Sparsifiner's phase 1)."""
        return [p for name, p in self.named_parameters() if not name.startswith("predictors.")]

    def head_mask_for(self, budget: float) -> torch.Tensor:
        """Hard top-k head mask [L, H] at ``budget`` (keeps ceil(b * L * H) heads)."""
        if self.gates is None:
            raise ValueError("this ViT has no head gates; build it with ViTClassifierConfig(gates='budget')")
        return hard_topk_mask(self.gates(budget).detach(), budget)

    def dense_mhsa_macs(self) -> float:
        c = self.config
        return c.num_layers * dense_attention_macs(c.num_tokens, c.hidden_size)

    def forward(self, pixel_values: torch.Tensor, attention: str = "dense", keep_rate: float = 1.0,
                budget: float | None = None, head_mode: str = "soft", token_keep: float | None = None,
                prune_layers: tuple[int, ...] = (), return_internals: bool = False,
                with_predictor: bool = False, sparse_kernel: str = "auto",
                head_mask: torch.Tensor | None = None) -> ViTOutput:
        """pixel_values [B, C, H, W] -> ViTOutput.

        attention: one of ATTENTION_PATHS; keep_rate: Sparsifiner's fraction of connections per query
        (sparse / masked); budget + head_mode: head gates (soft gate mass or hard top-k heads);
        token_keep + prune_layers: EViT pruning after the attention of those layers (0-based);
        with_predictor: also compute the predictor's scores on a dense pass (Sparsifiner phase 1);
        sparse_kernel: "auto", "csr" or "gather" (see ``bab.sparsifiner.predictor.sparse_attention``).
        """
        c = self.config
        if attention not in ATTENTION_PATHS:
            raise ValueError(f"attention must be one of {ATTENTION_PATHS}, got {attention!r}")
        keep_rate = validate_keep_rate(keep_rate)
        if attention in ("sparse", "masked") and self.predictors is None:
            raise ValueError(f"attention={attention!r} needs connectivity predictors: "
                             "build the model with ViTClassifierConfig(predictor=True)")
        if attention == "linformer" and self.linformer is None:
            raise ValueError("attention='linformer' needs ViTClassifierConfig(linformer_len=<projection length>)")
        if head_mode not in HEAD_MODES:
            raise ValueError(f"head_mode must be one of {HEAD_MODES}, got {head_mode!r}")
        if token_keep is not None:
            validate_token_keep(token_keep)
            bad = [i for i in prune_layers if not 0 <= i < c.num_layers]
            if bad:
                raise ValueError(f"prune_layers {bad} outside 0..{c.num_layers - 1}")
        weights = self._head_weights(budget, head_mode, head_mask)  # [L, H] or None

        x = self.hf.vit.embeddings(pixel_values)  # [B, n, D]
        B = x.shape[0]
        positions = None  # [B, n] original token positions once tokens have been pruned
        total_macs, internals = 0.0, []
        for i, layer in enumerate(self.layers):
            h = layer.layernorm_before(x)
            prune_here = token_keep is not None and i in prune_layers
            out, info = self._attention_core(i, layer.attention, h, attention, keep_rate, positions,
                                             need_probs=return_internals or prune_here,
                                             with_predictor=with_predictor, sparse_kernel=sparse_kernel)
            if weights is not None:
                out = out * weights[i].view(1, -1, 1, 1)
                if head_mode == "hard":  # skipped heads cost nothing
                    info["macs"] *= float(weights[i].detach().gt(0).float().mean())
            total_macs += info["macs"]
            out = layer.attention.o_proj(out.transpose(1, 2).reshape(B, x.shape[1], -1))
            x = x + layer.dropout(out)
            x = x + layer.dropout(layer.mlp(layer.layernorm_after(x)))
            if prune_here:
                x, kept = prune_tokens(x, info["cls_probs"], token_keep)
                base = positions if positions is not None else torch.arange(info["n"]).expand(B, -1)
                positions = torch.cat([base[:, :1], torch.gather(base, 1, kept)], dim=1)
            if return_internals or with_predictor:
                internals.append(info)
        tokens = self.hf.vit.layernorm(x)
        logits = self.hf.classifier(tokens[:, 0])
        return ViTOutput(logits, tokens, total_macs, total_macs / self.dense_mhsa_macs(), internals)

    def _head_weights(self, budget, head_mode, head_mask):
        """[L, H] weights on the heads' outputs, or None: the soft gates, the hard top-k mask (straight-through
        to the gates), or an explicit binary ``head_mask`` (hard mode, no gates needed)."""
        if budget is None and head_mask is None:
            return None
        if head_mask is None and self.gates is None:
            raise ValueError("budget= needs head gates: build the model with ViTClassifierConfig(gates='budget')")
        if head_mask is not None and head_mode != "hard":
            raise ValueError("head_mask is a hard mask: pass head_mode='hard' with it")
        c = self.config
        return head_weights(self.gates, budget, head_mode, head_mask, (c.num_layers, c.num_heads),
                            self.hf.classifier.weight.dtype)[0]

    def _attention_core(self, i, attn, h, path, keep_rate, positions, need_probs, with_predictor, sparse_kernel):
        """h [B, n, D] -> (per-head outputs [B, H, n, d], info dict with macs and, if asked, probabilities)."""
        B, n, D = h.shape
        H = self.config.num_heads
        q, k, v = (proj(h).view(B, n, H, -1).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        info = {"n": n, "positions": positions}
        predicted = None
        if self.predictors is not None and (path in ("sparse", "masked") or with_predictor):
            predicted = self.predictors[i](q, k, keep_rate, positions, with_scores=with_predictor)
            info.update(predicted)
        if path == "dense":
            if need_probs or with_predictor:
                out, info["probs"] = dense_attention(q, k, v)
            else:
                out = F.scaled_dot_product_attention(q, k, v)
            info["macs"] = dense_attention_macs(n, D)
        elif path == "linformer":
            out, low_rank = self.linformer[i](q, k, v)
            info.update(macs=linformer_macs(n, self.linformer[i].proj_len, D), low_rank_probs=low_rank)
        else:
            kk, first = num_connections(keep_rate, n), predicted["first_query"]  # queries < first attend densely
            up = self.predictors[i].up_projection_macs(predicted["coefficients"], positions)
            info["macs"] = sparse_attention_macs(n, kk, D, first) + predictor_macs(n, self.config.n_down, D, up, first)
            if path == "sparse":
                out, probs = attention_over_connections(q, k, v, predicted["index"], first, sparse_kernel, need_probs)
                if need_probs:
                    info["probs"] = probs
            else:
                out, info["probs"] = masked_dense_attention(q, k, v, connectivity_mask(predicted["index"], n, first))
        if "probs" in info:
            info["cls_probs"] = info["probs"][:, :, 0]  # [B, H, n]
        elif path == "linformer" and need_probs:
            raise ValueError("token pruning needs a full CLS attention row, which Linformer does not compute")
        return out, info
