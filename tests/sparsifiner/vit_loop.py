"""A reference for the ViT tests, independent of bab's attention cores and hooks: transformers' ViT forward written
out from its submodules' weights (patch projection, CLS and position embeddings, each layer's layernorm_before,
q/k/v/o projections, layernorm_after and MLP, the final layer norm and the classifier on CLS), with the attention of
each layer given as a function, each head's slice of the output projection's input times its head weight (a head
mask's 0 zeroes it) one head at a time, and token pruning written out (CLS plus the top ceil(keep * m) patches by
the CLS query's attention averaged over heads, in sequence order).

Not a test module (no ``test_`` prefix): tests import it as ``tests.sparsifiner.vit_loop``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, n, H * d] -> [B, H, n, d]."""
    B, n, width = t.shape
    return t.view(B, n, num_heads, width // num_heads).transpose(1, 2)


def dense_attention(layer: int, attention, q, k, v, positions) -> tuple[torch.Tensor, dict]:
    """softmax(Q K^T / sqrt(d)) V over every key."""
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return probs @ v, {"probs": probs}


def predictor_masked_attention(keep: float):
    """Softmax over each query's kept keys: the layer's own connectivity predictor (called directly, on the q and k
    of this loop) names them; the queries before its ``first_query`` keep every key. Also the attention cores'
    multiply-adds per example, written out: QK^T and AV over the kept keys, W_down K, Q K_down^T for the predicted
    queries and one multiply-add per basis entry |W_up| >= up_prune in each row m of a nonzero coefficient."""

    def attend(layer: int, attention, q, k, v, positions):
        B, H, n, d = q.shape
        predictor = attention.connectivity_predictor
        predicted = predictor(q, k, keep, positions)
        index, first = predicted["index"], predicted["first_query"]
        mask = torch.zeros(B, H, n, n, dtype=torch.bool)
        mask[:, :, :first] = True
        mask[:, :, first:] = mask[:, :, first:].scatter(-1, index, True)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        kept = index.shape[-1]
        up = 0.0
        for b in range(B):
            columns = torch.arange(n) if positions is None else positions[b]
            w_up = predictor.w_up[:, :, columns]  # [G, n_down, n]: G = H, or 1 shared by the heads
            nnz = (w_up.abs() >= predictor.up_prune).sum(-1)  # [G, n_down]
            up += float(((predicted["coefficients"][b] != 0) * nnz.unsqueeze(1)).sum())
        macs = (2 * ((n - first) * kept + first * n) * H * d + (2 * n - first) * predictor.n_down * H * d
                + up / B)
        return probs @ v, {"probs": probs, "index": index, "first_query": first, "mask": mask, "macs": macs,
                           "predicted": predicted}

    return attend


def linformer_attention(layer: int, attention, q, k, v, positions) -> tuple[torch.Tensor, dict]:
    """Linformer, one example and head at a time: softmax(Q (E K)^T / sqrt(d)) (F V) with the layer's E and F
    [proj_len, n_max] cut to the sequence's n columns."""
    B, H, n, d = q.shape
    e = attention.linformer_projection.e[:, :n]
    f = attention.linformer_projection.f[:, :n]
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(H):
            probs = torch.softmax(q[b, h] @ (e @ k[b, h]).T / math.sqrt(d), dim=-1)  # [n, proj_len]
            out[b, h] = probs @ (f @ v[b, h])
    return out, {"macs": 4 * n * e.shape[0] * H * d}


def vit_loop(model, pixels: torch.Tensor, attend=dense_attention, token_keep: float | None = None,
             prune_layers=(), head_weights: torch.Tensor | None = None) -> dict:
    """transformers' ``ViTForImageClassification`` ``model``'s forward, written out (see the module doc).

    ``attend(layer, attention_module, q, k, v, positions) -> (heads [B, H, n, d], info)``; ``head_weights``
    [L, H]: each head's output times its weight before the output projection (a binary head mask: the heads with 0
    contribute nothing); tokens pruned after ``prune_layers`` at
    ``token_keep`` (by ``info["probs"]``). Returns {"logits", "tokens" (the final layer-normed tokens),
    "positions" (their original positions, or None), "layers" (each layer's info, with "positions": the original
    positions of its input tokens)}."""
    vit = model.vit
    embeddings = vit.embeddings
    B = pixels.shape[0]
    patches = embeddings.patch_embeddings.projection(pixels).flatten(2).transpose(1, 2)  # [B, m, D]
    x = torch.cat([embeddings.cls_token.expand(B, -1, -1), patches], dim=1) + embeddings.position_embeddings
    D = x.shape[-1]
    H = model.config.num_attention_heads
    positions, layers = None, []
    for i, layer in enumerate(vit.layers):
        attention = layer.attention
        n = x.shape[1]
        h = layer.layernorm_before(x)
        q, k, v = (split_heads(proj(h), H) for proj in (attention.q_proj, attention.k_proj, attention.v_proj))
        heads, info = attend(i, attention, q, k, v, positions)
        if head_weights is not None:
            heads = torch.stack([heads[:, head] * head_weights[i, head] for head in range(H)], dim=1)
        x = x + attention.o_proj(heads.transpose(1, 2).reshape(B, n, D))
        x = x + layer.mlp(layer.layernorm_after(x))
        layers.append({**info, "positions": positions, "n": n})
        if token_keep is not None and i in prune_layers:
            cls = info["probs"][:, :, 0, 1:].mean(1)  # [B, m]: the CLS query's attention to each patch
            top = cls.topk(math.ceil(token_keep * (n - 1)), dim=-1).indices.sort(-1).values + 1  # sequence order
            start = positions if positions is not None else torch.arange(n).expand(B, n)
            positions = torch.cat([start[:, :1], torch.gather(start, 1, top)], dim=1)
            x = torch.cat([x[:, :1], torch.gather(x, 1, top.unsqueeze(-1).expand(-1, -1, D))], dim=1)
    norm = vit.layernorm  # functional: the module's forward hook (bab's state) stays out of the reference
    tokens = F.layer_norm(x, (D,), norm.weight, norm.bias, norm.eps)
    return {"logits": model.classifier(tokens[:, 0]), "tokens": tokens, "positions": positions, "layers": layers}


def trained_looking(model, seed: int = 3):
    """``model`` (transformers' ViT or DeiT) with trained-looking weights, in place: every backbone Linear and the
    classifier drawn with std 1 / sqrt(fan in) (the same draws for the same architecture; attached predictors and
    projections are left alone). HF's initialisation (std 0.02) leaves near-uniform attention and logits near 0,
    where dropping keys or heads hardly moves the logits; with these a tolerance of 1e-5 on them tells the right
    connections (or heads) from wrong ones."""
    g = torch.Generator().manual_seed(seed)
    linears = [model.classifier]
    for layer in model.base_model.layers:
        attention = layer.attention
        linears += [attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj, layer.mlp.fc1,
                    layer.mlp.fc2]
    with torch.no_grad():
        for linear in linears:
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) / math.sqrt(linear.in_features))
    return model
