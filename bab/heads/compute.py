"""What structural head pruning removes from a Hugging Face encoder: parameters and multiply-accumulates.

Two independent counts, side by side (the paper's compute analysis, BERT-Mini at length 128):

- **analytic**, from the shapes alone, per layer with d model width, n heads kept, Dh head
  width, F feed-forward width and T tokens:
    head-specific attention parameters  4 d n Dh + 3 n Dh   (Q/K/V rows with biases, output columns)
    attention MACs                      4 T d n Dh + 2 n T^2 Dh   (Q/K/V/O projections, QK^T, AV)
    layer MACs                          attention MACs + 2 T d F   (the two feed-forward matrices)
- **FlopCounterMode**, on one forward pass of one sequence of length T with the eager attention
  implementation (the fused SDPA kernel is invisible to the counter), attributed to modules by
  their names; MACs = FLOPs / 2.

Softmax, layer norms, biases and activations are not matrix products and are counted by neither.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from bab.heads.hf_encoder import attention_blocks


def _shapes(model):
    config = model.config
    width = getattr(config, "hidden_size", None) or config.dim
    ffn = getattr(config, "intermediate_size", None) or config.hidden_dim
    blocks = attention_blocks(model)
    return width, ffn, blocks


def analytic_compute(model, seq_len: int = 128) -> dict:
    """Parameters and MACs (one sequence of ``seq_len`` tokens) from the model's shapes."""
    d, ffn, blocks = _shapes(model)
    T = seq_len
    head_params = attention_macs = layer_macs = 0
    for block in blocks:
        n, dh = block.num_heads, block.head_dim
        head_params += 4 * d * n * dh + 3 * n * dh
        attn = 4 * T * d * n * dh + 2 * n * T * T * dh
        attention_macs += attn
        layer_macs += attn + 2 * T * d * ffn
    return {"parameters": sum(p.numel() for p in model.parameters()), "head_attention_parameters": head_params,
            "attention_macs": attention_macs, "layer_macs": layer_macs}


@torch.no_grad()
def counted_compute(model, seq_len: int = 128) -> dict:
    """Attention and transformer-layer MACs of one sequence, from FlopCounterMode (eager attention)."""
    saved = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        ids = torch.ones(1, seq_len, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        model.set_attn_implementation(saved)
    by_module = counter.get_flop_counts()
    root = type(model).__name__
    layer_prefix = f"{root}.distilbert.transformer.layer." if model.config.model_type == "distilbert" else \
        f"{root}.{model.base_model_prefix}.encoder.layer."
    attention = layers = 0
    for name, ops in by_module.items():
        if not name.startswith(layer_prefix):
            continue
        parts = name[len(layer_prefix):].split(".")
        total = sum(ops.values())
        if len(parts) == 1:  # a whole layer
            layers += total
        elif len(parts) == 2 and parts[1] == "attention":
            attention += total
    return {"attention_macs": attention // 2, "layer_macs": layers // 2}


def pruning_compute_table(dense, pruned, seq_len: int = 128) -> pd.DataFrame:
    """Dense vs pruned: each quantity, what was removed (%), analytic beside FlopCounterMode."""
    a_dense, a_pruned = analytic_compute(dense, seq_len), analytic_compute(pruned, seq_len)
    c_dense, c_pruned = counted_compute(dense, seq_len), counted_compute(pruned, seq_len)
    rows = []
    for key, label in (("parameters", "parameters (all)"),
                       ("head_attention_parameters", "head-specific attention parameters"),
                       ("attention_macs", f"attention MACs (length {seq_len})"),
                       ("layer_macs", f"transformer-layer MACs (length {seq_len})")):
        row = {"quantity": label, "dense": a_dense[key], "pruned": a_pruned[key],
               "removed % (analytic)": 100.0 * (1 - a_pruned[key] / a_dense[key])}
        if key in c_dense:
            row["dense (FlopCounterMode)"] = c_dense[key]
            row["pruned (FlopCounterMode)"] = c_pruned[key]
            row["removed % (FlopCounterMode)"] = 100.0 * (1 - c_pruned[key] / c_dense[key])
        rows.append(row)
    return pd.DataFrame(rows).set_index("quantity")
