"""BERT and DistilBERT classifiers with a different number of attention heads in each layer.

This file is copied next to the weights of a pruned model, and config.json names its classes in
``auto_map``, so transformers alone loads the folder (no other package needed):

    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    classify = pipeline("text-classification", model=folder, trust_remote_code=True)

A transformers config has one head count for every layer, so config.json also lists, per layer,
the original indices of the heads that were kept (``bab_kept_heads``). The classes below are
transformers' own; the only change is that, before the weights are loaded, each layer's query, key
and value projections are narrowed to its kept heads and its output projection takes that narrower
input. The attention code infers the head count from these shapes.
"""

from __future__ import annotations

from torch import nn
from transformers import BertForSequenceClassification as _BertForSequenceClassification
from transformers import DistilBertForSequenceClassification as _DistilBertForSequenceClassification

KEPT_HEADS_KEY = "bab_kept_heads"


def _resized(linear: nn.Linear, in_features: int | None = None, out_features: int | None = None) -> nn.Linear:
    """A linear layer of a new width, on the old one's device and dtype (its weights come from the file)."""
    return nn.Linear(in_features or linear.in_features, out_features or linear.out_features,
                     bias=linear.bias is not None, device=linear.weight.device, dtype=linear.weight.dtype)


def _keep_heads(attention: nn.Module, projections: tuple[str, ...], out_parent: nn.Module, out_name: str,
                n_heads: int) -> int:
    """Narrow one layer's Q/K/V (``projections`` of ``attention``) and output projection to ``n_heads`` heads."""
    width = n_heads * attention.attention_head_size
    for name in projections:
        setattr(attention, name, _resized(getattr(attention, name), out_features=width))
    setattr(out_parent, out_name, _resized(getattr(out_parent, out_name), in_features=width))
    return width


def _pruned_layers(config, layers: nn.ModuleList) -> list[tuple[nn.Module, int]]:
    """(layer, number of heads it keeps) for every layer; none when the config records no pruning."""
    kept = getattr(config, KEPT_HEADS_KEY, None)
    if kept is None:  # nothing was pruned: transformers' shapes are right as they are
        return []
    if len(kept) != len(layers) or not all(kept):
        raise ValueError(f"config.json's {KEPT_HEADS_KEY} must list at least one kept head for each of the "
                         f"{len(layers)} layers, got {kept}; write the folder with bab's save_pruned")
    return [(layer, len(heads)) for layer, heads in zip(layers, kept, strict=True)]


# The classes keep transformers' names: pipeline() checks a model's class name against the task's models, and a
# name of our own would log a long "not supported for text-classification" line before it works anyway.
class BertForSequenceClassification(_BertForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        for layer, n in _pruned_layers(config, self.bert.encoder.layer):
            attention = layer.attention.self
            width = _keep_heads(attention, ("query", "key", "value"), layer.attention.output, "dense", n)
            attention.num_attention_heads, attention.all_head_size = n, width


class DistilBertForSequenceClassification(_DistilBertForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        for layer, n in _pruned_layers(config, self.distilbert.transformer.layer):
            _keep_heads(layer.attention, ("q_lin", "k_lin", "v_lin"), layer.attention, "out_lin", n)
            layer.attention.n_heads = n  # its ``dim`` is the model width, which pruning keeps


# the names folders written by earlier versions give in their config's auto_map
PrunedBertForSequenceClassification = BertForSequenceClassification
PrunedDistilBertForSequenceClassification = DistilBertForSequenceClassification
