"""Notebook 03's compute analysis on the paper's own encoder shape: BERT-Mini with random weights, dense and
structurally pruned, offline."""

from __future__ import annotations

import copy

import torch

from bab.heads.hf_pruning import prune_heads

# BERT-Mini (4 layers x 4 heads, width 256, feed-forward 1024), the paper's encoder: its shape alone decides what
# structural pruning removes, so the paper's compute figures can be checked on random weights, offline.
BERT_MINI_SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)


def paper_shape_pruned(budget: float, num_labels: int = 4):
    """(a random-weight BERT-Mini-shaped classifier, a copy with round(budget * heads) heads of every layer kept):
    the pair the paper's compute analysis measures, for ``bab.heads.compute.pruning_compute_table``."""
    from transformers import BertConfig, BertForSequenceClassification

    heads = BERT_MINI_SHAPE["num_attention_heads"]
    kept = round(budget * heads)
    if not 1 <= kept <= heads:
        raise ValueError(f"budget {budget} keeps {kept} of {heads} heads a layer; give a budget in "
                         f"[{0.5 / heads:g}, 1]")
    torch.manual_seed(0)  # the weights do not matter to a count; fixed so the models are the same every run
    dense = BertForSequenceClassification(BertConfig(**BERT_MINI_SHAPE, num_labels=num_labels)).eval()
    pruned = copy.deepcopy(dense)
    prune_heads(pruned, [list(range(kept))] * BERT_MINI_SHAPE["num_hidden_layers"])
    return dense, pruned.eval()
