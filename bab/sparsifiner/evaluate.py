"""Evaluating a ViT with Sparsifiner, Linformer or token pruning: accuracy, MHSA cost, FLOPs, masks and maps.

The models are transformers' ViTs with Sparsifiner attached (``bab.sparsifiner.vit.build_vit``); the forward options
are ``bab.sparsifiner.vit.ViTForward``'s fields as keywords."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode

from bab.core.outcomes import unit_ids
from bab.sparsifiner.attach import predictors
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.vit import dense_mhsa_macs, num_tokens, vit_forward
from bab.sparsifiner.whole_model import model_view


@torch.no_grad()
def evaluate_vit(model, data: Dataset, batch_size: int = 500, **forward) -> dict:
    """Accuracy (%), mean loss and MHSA cost (multiply-adds per example and fraction of dense) on ``data``, with
    the forward's options ``forward`` (``bab.sparsifiner.vit.ViTForward``'s fields as keywords); ``outcomes``:
    whether each example was classified right (numpy bool, in data order), ``unit_ids`` each image's fingerprint
    (``bab.core.outcomes.unit_ids``), ``n`` how many were scored."""
    model.eval()
    right, ids, loss_sum, seen, macs = [], [], 0.0, 0, 0.0
    for pixels, labels in DataLoader(data, batch_size=batch_size):
        ids.append(unit_ids(pixels, labels))
        out = vit_forward(model, pixels, **forward)
        loss_sum += F.cross_entropy(out.logits, labels, reduction="sum").item()
        right.append(out.logits.argmax(-1) == labels)
        seen += labels.numel()
        macs += out.mhsa_macs * labels.numel()
    macs /= seen
    outcomes = torch.cat(right).numpy()
    return {"accuracy": 100.0 * outcomes.sum() / seen, "loss": loss_sum / seen, "mhsa_macs": macs,
            "cost": macs / dense_mhsa_macs(model), "n": seen, "outcomes": outcomes, "unit_ids": np.concatenate(ids)}


@torch.no_grad()
def attention_core_flops(model, pixels: torch.Tensor, **forward) -> dict:
    """FlopCounterMode on one forward (options ``forward``, ``ViTForward``'s fields as keywords): total FLOPs,
    and the attention-core FLOPs (everything but the q/k/v/o projections, MLPs, patch embedding and
    classifier) per example. FlopCounterMode counts matrix products only (2 FLOPs per multiply-add) and sees
    the dense up-projection and the full masked scores as they are computed, unlike the analytic count."""
    model.eval()
    with FlopCounterMode(display=False) as counter:  # return_internals: explicit matmuls, which it can count
        vit_forward(model, pixels, return_internals=True, **forward)
    total = counter.get_total_flops()
    counts = counter.get_flop_counts()
    outside = 0
    for name, per_op in counts.items():
        # module-level entries: projections, MLP, patch embedding and classifier are not attention-core work
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2", "projection", "classifier"):
            outside += sum(per_op.values())
    return {"total_flops": total / len(pixels), "attention_flops": (total - outside) / len(pixels)}


def basis_sparsity(model) -> float:
    """Fraction of W_up entries pruned to zero (the paper: about 90% after phase 1)."""
    total = pruned = 0
    for predictor in predictors(model):
        basis = predictor.sparse_basis(num_tokens(model))
        total += basis.numel()
        pruned += int((basis == 0).sum())
    return pruned / total


@torch.no_grad()
def coefficient_sparsity(model, pixels: torch.Tensor) -> float:
    """Fraction of the low-rank coefficients A_down at or below tau (the paper: 87% with n_down 32, tau 0.05)."""
    out = vit_forward(model, pixels, attention="dense", with_predictor=True)
    coeff = torch.cat([layer["coefficients"].flatten() for layer in out.layers])
    return float((coeff == 0).float().mean())


def topk_exact(model, pixels: torch.Tensor, keep_rate: float) -> bool:
    """Every predicted query (all, or all but CLS with ``cls_dense``) of every layer and head keeps exactly
    ceil(keep_rate * n) distinct keys."""
    with torch.no_grad():
        out = vit_forward(model, pixels, attention="sparse", keep_rate=keep_rate, return_internals=True)
    k = num_connections(keep_rate, num_tokens(model))
    for layer in out.layers:
        index = layer["index"]
        distinct = torch.sort(index, dim=-1).values.diff(dim=-1).ne(0).all()
        if index.shape[-1] != k or not bool(distinct):
            return False
    return True


@torch.no_grad()
def fused_logit_check(model, pixels: torch.Tensor, keep_rates) -> dict[float, float]:
    """{keep rate: max |fused - masked| over the logits of ``pixels``}: the whole model with the fused C++ kernel
    against the reference path ("masked": dense scores masked to the predictor's connections). ``model``:
    transformers' ViT / DeiT with Sparsifiner attached (its core set for each forward and put back after;
    ``bab.sparsifiner.whole_model``). Given the same q and k both keep the same
    keys, so the gap is float rounding (~1e-6 on notebook 05's 4-layer model). A larger gap means some layer kept
    other keys: the two paths round differently (~1e-7), which can flip a key tied to that precision at the k-th
    place, and because W_down mixes every key into every query's A_down, one flip shifts the next layers' rankings
    and spreads (12 layers at n = 577: the torch sparse and masked paths, both references, differ by 1e-2;
    docs/speed.md). Raises a RuntimeError saying why where the kernel could not be built. The masked path forms
    [B, H, n, n] scores: pass a few images at long sequences."""
    run = model_view(model).run
    model.eval()
    gaps = {}
    for rate in keep_rates:
        fused = run(pixels, "fused", rate)[0]
        masked = run(pixels, "masked", rate)[0]
        gaps[rate] = float((fused - masked).abs().max())
    return gaps


def mhsa_cost_table(model, keep_rates, pixels: torch.Tensor) -> pd.DataFrame:
    """Per keep rate: analytic MHSA multiply-adds (paper convention), FlopCounterMode FLOPs of the attention
    core per example (sparse path run with the gather kernel, whose bmm FlopCounterMode can count; it does
    not see the CSR kernel), and both as fractions of dense."""
    dense_flops = attention_core_flops(model, pixels, attention="dense")
    dense_macs = dense_mhsa_macs(model)
    rows = []
    for rate in keep_rates:
        with torch.no_grad():
            out = vit_forward(model, pixels, attention="sparse", keep_rate=rate)
        flops = attention_core_flops(model, pixels, attention="sparse", keep_rate=rate, sparse_kernel="gather")
        rows.append({"keep_rate": rate, "connections": num_connections(rate, num_tokens(model)),
                     "MHSA MMACs (analytic)": out.mhsa_macs / 1e6, "analytic fraction": out.mhsa_macs / dense_macs,
                     "attention MFLOPs (FlopCounterMode)": flops["attention_flops"] / 1e6,
                     "counted fraction": flops["attention_flops"] / dense_flops["attention_flops"]})
    return pd.DataFrame(rows)


@torch.no_grad()
def attention_maps(model, image: torch.Tensor, query: int, keep_rate: float, layers, heads) -> dict:
    """For one image [1, C, H, W] and query token: {(layer, head): [n]} rows of the connectivity mask, the
    sparse attention (Sparsifiner path at ``keep_rate``) and the full attention (the same model, dense path),
    plus the sparse coefficients [n_q, n_down] (the predicted queries: all, or all but CLS with ``cls_dense``)
    and basis [n_down, n] of every layer (head ``heads[0]``)."""
    model.eval()
    sparse = vit_forward(model, image, attention="sparse", keep_rate=keep_rate, return_internals=True)
    full = vit_forward(model, image, attention="dense", return_internals=True)
    out = {"mask": {}, "sparse": {}, "full": {}, "coefficients": {}, "basis": {}}
    n = num_tokens(model)
    for layer in layers:
        info = sparse.layers[layer]
        first = info["first_query"]  # queries before it (CLS with cls_dense) attend to every key
        for head in heads:
            mask = torch.ones(n, dtype=torch.bool)
            if query >= first:
                mask[:] = False
                mask[info["index"][0, head, query - first]] = True
            out["mask"][(layer, head)] = mask.float().numpy()
            out["sparse"][(layer, head)] = info["probs"][0, head, query].numpy()
            out["full"][(layer, head)] = full.layers[layer]["probs"][0, head, query].numpy()
        out["coefficients"][f"layer {layer}, head {heads[0]}"] = info["coefficients"][0, heads[0]].numpy()
        out["basis"][layer] = predictors(model)[layer].sparse_basis(n)[heads[0]].numpy()
    return out
