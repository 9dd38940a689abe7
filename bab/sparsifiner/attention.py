"""The ViT's attention cores, chosen by name (as transformers' ``ALL_ATTENTION_FUNCTIONS`` or timm's attention
layers are): softmax(QK^T/sqrt(d)) V and its Sparsifiner and Linformer replacements.

Every core has one signature, ``core(q, k, v, layer) -> (out, info)``: q, k, v [B, H, n, d] are one layer's
per-head projections, ``layer`` (a ``CoreInputs``) holds that layer's predictor and Linformer projection and the
call's options, out [B, H, n, d] is the per-head output and ``info`` a dict with the core's multiply-adds per
example ("macs", the paper's "MHSA FLOPs", counted from the shapes it ran), its attention probabilities
[B, H, n, n] when asked and it computes them ("probs"), and the predictor's output where it ran ("index",
"coefficients", "first_query", and "scores" with ``with_predictor``).

- ``dense``: ``F.scaled_dot_product_attention`` (explicit matmuls when the probabilities are needed);
- ``sparse``: Sparsifiner over the k = ceil(keep_rate * n) predicted keys per query only (CSR kernel at
  inference, a gather when training; ``bab.sparsifiner.kernels.sparse_attention``);
- ``masked``: Sparsifiner's reference, dense scores masked to the same connections (``F.scaled_dot_product_attention``
  with the mask when the probabilities are not needed, explicit matmuls when they are);
- ``fused``: the predictor, the top-k and the sparse attention in one C++ kernel (``bab.sparsifiner.fused``):
  the same connections and outputs as ``sparse`` up to float rounding; float32 CPU inference only;
- ``linformer``: low-rank attention over ``linformer_len`` projected keys/values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bab.sparsifiner import fused
from bab.sparsifiner.kernels import (
    attention_over_connections,
    connectivity_mask,
    dense_attention,
    dense_attention_macs,
    masked_dense_attention,
    predictor_macs,
    sparse_attention_macs,
)
from bab.sparsifiner.linformer import LinformerProjection, linformer_macs
from bab.sparsifiner.predictor import ConnectivityPredictor, num_connections


@dataclass(frozen=True)
class CoreInputs:
    """What a core reads besides q, k, v: one layer's modules and the options of the call."""

    predictor: ConnectivityPredictor | None  # the layer's connectivity predictor, if the model has them
    linformer: LinformerProjection | None  # the layer's Linformer projection, if the model has them
    keep_rate: float  # Sparsifiner's fraction of connections per query
    positions: torch.Tensor | None  # [B, n] original token positions once tokens have been pruned
    need_probs: bool  # return the attention probabilities (internals, or the CLS row for token pruning)
    with_predictor: bool  # also run the predictor with its dense scores (Sparsifiner phase 1)
    sparse_kernel: str  # "auto", "csr" or "gather": the sparse core's kernel
    selection: str = "auto"  # the masked core's top-k selection (SELECTIONS)


AttentionCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, CoreInputs], tuple[torch.Tensor, dict]]


def _predicted(q, k, layer: CoreInputs, needed: bool, select=None) -> dict:
    """The predictor's output when the core selects with it (``needed``) or the call asks for its scores;
    ``select``: the predictor's ``select`` (another implementation of its top-k rule)."""
    if layer.predictor is None or not (needed or layer.with_predictor):
        return {}
    return layer.predictor(q, k, layer.keep_rate, layer.positions, with_scores=layer.with_predictor, select=select)


# How the masked core selects each query's top k: "auto", by the fused kernel (``fused.fused_selection``) where it
# is built and takes q (float32, on the CPU), else by the predictor's torch ranking; "torch", always the latter.
# Both give the same sets bit for bit, in different orders, which the mask forgets: the output, the loss and
# every gradient are the same, and a phase-2 training step at 197 tokens is faster (``python -m bab bench sparse
# --training``). The other cores keep the torch ranking, whose order their sums follow.
SELECTIONS = ("auto", "torch")


def _masked_selection(q, layer: CoreInputs):
    """The ``select`` the masked core passes to the predictor (None: its own torch ranking)."""
    if layer.selection == "torch" or layer.keep_rate >= 1:  # every key: nothing to rank
        return None
    usable = q.device.type == "cpu" and q.dtype == torch.float32 and fused.load_extension() is not None
    return fused.fused_selection if usable else None


def _sparsifiner_macs(q, layer: CoreInputs, predicted: dict) -> float:
    """Attention over k keys per predicted query (queries before ``first_query`` attend densely) plus the
    predictor's down-projection and sparse up-projection, per example."""
    _, H, n, d = q.shape
    first = predicted["first_query"]
    up = layer.predictor.up_projection_macs(predicted["coefficients"], layer.positions)
    return (sparse_attention_macs(n, num_connections(layer.keep_rate, n), H * d, first)
            + predictor_macs(n, layer.predictor.n_down, H * d, up, first))


def dense_core(q, k, v, layer: CoreInputs) -> tuple[torch.Tensor, dict]:
    info = _predicted(q, k, layer, needed=False)
    if layer.need_probs or layer.with_predictor:
        out, info["probs"] = dense_attention(q, k, v)
    else:
        out = F.scaled_dot_product_attention(q, k, v)
    _, H, n, d = q.shape
    info["macs"] = dense_attention_macs(n, H * d)
    return out, info


def sparse_core(q, k, v, layer: CoreInputs) -> tuple[torch.Tensor, dict]:
    info = _predicted(q, k, layer, needed=True)
    info["macs"] = _sparsifiner_macs(q, layer, info)
    out, probs = attention_over_connections(q, k, v, info["index"], info["first_query"], layer.sparse_kernel,
                                            layer.need_probs)
    if layer.need_probs:
        info["probs"] = probs
    return out, info


def masked_core(q, k, v, layer: CoreInputs) -> tuple[torch.Tensor, dict]:
    info = _predicted(q, k, layer, needed=True, select=_masked_selection(q, layer))
    info["macs"] = _sparsifiner_macs(q, layer, info)
    mask = connectivity_mask(info["index"], k.shape[-2], info["first_query"])
    if layer.need_probs or layer.with_predictor:
        out, info["probs"] = masked_dense_attention(q, k, v, mask)
    else:  # the same masked softmax fused, no [B, H, n, n] probabilities: a phase-2 step 1.37x faster at 197
        # tokens, as fast at 50 (python -m bab bench sparse --training)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, info


def fused_core(q, k, v, layer: CoreInputs) -> tuple[torch.Tensor, dict]:
    """No probabilities (the kernel never forms them) and no autograd; raises, saying why, where the kernel
    could not be built."""
    module = fused.require_extension(instead="attention='sparse'")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError("attention='fused' is an inference kernel without autograd: call the model under "
                           "torch.no_grad(), or train with attention='sparse' or 'masked'")
    result = fused.fused_inference(layer.predictor, q, k, v, layer.keep_rate, layer.positions, module=module)
    out = result.pop("out")
    result["macs"] = _sparsifiner_macs(q, layer, result)
    return out, result


def linformer_core(q, k, v, layer: CoreInputs) -> tuple[torch.Tensor, dict]:
    info = _predicted(q, k, layer, needed=False)
    out, info["low_rank_probs"] = layer.linformer(q, k, v)
    _, H, n, d = q.shape
    info["macs"] = linformer_macs(n, layer.linformer.proj_len, H * d)
    return out, info


ATTENTION_CORES: dict[str, AttentionCore] = {
    "dense": dense_core,
    "sparse": sparse_core,
    "masked": masked_core,
    "fused": fused_core,
    "linformer": linformer_core,
}
PREDICTOR_CORES = ("sparse", "masked", "fused")  # the cores that attend over the predictor's connections
CORES_WITHOUT_PROBS = ("fused", "linformer")  # no full attention row, so no CLS row to prune tokens by


def attention_core(name: str) -> AttentionCore:
    """The core registered as ``name``; a ValueError listing the known names otherwise."""
    if name not in ATTENTION_CORES:
        raise ValueError(f"attention must be one of {tuple(ATTENTION_CORES)}, got {name!r}")
    return ATTENTION_CORES[name]
