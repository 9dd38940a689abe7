"""Structural head pruning of Hugging Face encoders, which transformers 5 no longer provides.

Pruning a head removes its rows of the Q, K and V projections (weights and biases) and its
columns of the output projection, then updates the layer's head count. The result is a smaller
ordinary model: nothing is masked, every matrix product shrinks. A pruned model equals the
gated model run with the same binary head mask (``GatedHFClassifier(..., mode="hard",
head_mask=mask)``), which the tests check for BERT and DistilBERT, eager and SDPA.

The kept heads (indices into the original heads of each layer) are recorded in the model's
config as ``bab_kept_heads``, so ``save_pruned`` / ``load_pruned`` rebuild the right shapes
before loading the weights. ``save_pruned`` also copies ``modeling_pruned.py`` (transformers'
classes, narrowed per layer from that list) into the folder and names it in config.json's
``auto_map``, so ``AutoModelForSequenceClassification.from_pretrained(folder,
trust_remote_code=True)`` and ``pipeline(..., trust_remote_code=True)`` load it without bab.

A layer is never emptied: a mask that keeps no head of some layer raises (use a per-layer
floor, ``head_mask_for(budget, min_per_layer=1)``).

Shapes: d model width, n heads kept in a layer, Dh head width, T sequence length.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bab.core.folders import share
from bab.heads.attach import KEPT_HEADS_KEY, detach
from bab.heads.hf_encoder import attention_blocks, classifier_from_config

WEIGHTS_NAME = "model.safetensors"
MODELING_FILE = Path(__file__).with_name("modeling_pruned.py")  # copied into every pruned folder
REMOTE_CLASSES = {"bert": "BertForSequenceClassification", "distilbert": "DistilBertForSequenceClassification"}


def kept_heads(model) -> list[list[int]]:
    """Per layer, the original indices of the heads the model still has."""
    recorded = getattr(model.config, KEPT_HEADS_KEY, None)
    if recorded is not None:
        return [list(layer) for layer in recorded]
    return [list(range(block.num_heads)) for block in attention_blocks(model)]


def _as_keep_lists(keep, current: list[int]) -> list[list[int]]:
    """A binary [L, H] mask or per-layer index lists -> sorted index lists, validated."""
    if isinstance(keep, torch.Tensor):
        if keep.dim() != 2 or keep.shape[0] != len(current) or any(keep.shape[1] != n for n in current):
            raise ValueError(f"head mask must have shape [{len(current)}, heads per layer {current}], "
                             f"got {tuple(keep.shape)}")
        if not torch.all((keep == 0) | (keep == 1)):
            raise ValueError("head mask must be binary (1 keeps a head, 0 prunes it)")
        keep = [torch.nonzero(row, as_tuple=True)[0].tolist() for row in keep]
    keep = [sorted(int(h) for h in layer) for layer in keep]
    if len(keep) != len(current):
        raise ValueError(f"need one list of kept heads per layer ({len(current)}), got {len(keep)}")
    for layer, (heads, n) in enumerate(zip(keep, current, strict=True)):
        if not heads:
            raise ValueError(
                f"pruning would remove every head of layer {layer}; structural pruning never empties a layer. "
                "Build the mask with a per-layer floor (model.head_mask_for(budget, min_per_layer=1)) or "
                "raise the budget"
            )
        if len(set(heads)) != len(heads) or heads[0] < 0 or heads[-1] >= n:
            raise ValueError(f"layer {layer}: kept heads {heads} must be distinct indices in [0, {n})")
    return keep


def _rows(heads: list[int], head_dim: int) -> torch.Tensor:
    """Indices of the output features (Q/K/V rows) or input features (output columns) of ``heads``."""
    return (torch.tensor(heads)[:, None] * head_dim + torch.arange(head_dim)).flatten()


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> None:
    """Keep ``index`` along ``dim`` of the weight (0: output features, 1: input features), in place."""
    with torch.no_grad():
        linear.weight = nn.Parameter(linear.weight.index_select(dim, index).clone())
        if dim == 0 and linear.bias is not None:
            linear.bias = nn.Parameter(linear.bias.index_select(0, index).clone())
    if dim == 0:
        linear.out_features = len(index)
    else:
        linear.in_features = len(index)


@torch.no_grad()
def prune_heads(model, keep) -> list[list[int]]:
    """Remove every head not in ``keep`` from ``model`` (a BERT-family or DistilBERT classifier), in place.

    ``keep``: a binary mask [L, H_l] over the model's current heads, or per-layer lists of head
    indices to keep. Returns the kept heads as indices into the *original* heads (also stored in
    ``model.config.bab_kept_heads``), so pruning twice composes.
    """
    blocks = attention_blocks(model)
    keep = _as_keep_lists(keep, [block.num_heads for block in blocks])
    original = kept_heads(model)
    for block, heads in zip(blocks, keep, strict=True):
        if len(heads) == block.num_heads:
            continue
        index = _rows(heads, block.head_dim).to(block.query.weight.device)  # a model on a GPU is pruned there
        for linear in (block.query, block.key, block.value):
            _slice_linear(linear, index, dim=0)
        _slice_linear(block.out, index, dim=1)
        block.set_num_heads(len(heads))
    composed = [[layer_original[h] for h in layer_keep] for layer_original, layer_keep in zip(original, keep,
                                                                                              strict=True)]
    setattr(model.config, KEPT_HEADS_KEY, composed)
    return composed


def pruned_copy(model, budget: float, min_per_layer: int = 1):
    """A pruned copy of a gated classifier's HF model: the top-k heads at ``budget`` with a per-layer floor.

    ``model``: a ``GatedHFClassifier`` (left unchanged). Returns (the plain pruned HF model in eval mode,
    the binary [L, H] mask it keeps), so it equals ``model(ids, mode="hard", head_mask=mask)``.
    """
    mask = model.head_mask_for(budget, min_per_layer=min_per_layer)
    pruned = detach(copy.deepcopy(model.hf))  # the copy is a plain model: no gate hooks left behind
    prune_heads(pruned, mask)
    return pruned.eval(), mask


def save_pruned(model, folder, tokenizer=None) -> Path:
    """Write config.json (kept heads, auto_map), model.safetensors, modeling_pruned.py and optionally the tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    setattr(model.config, KEPT_HEADS_KEY, kept_heads(model))
    config = copy.deepcopy(model.config)  # the model in memory stays a plain transformers model
    config.auto_map = {"AutoModelForSequenceClassification":
                       f"{MODELING_FILE.stem}.{REMOTE_CLASSES[config.model_type]}"}
    config.save_pretrained(folder)
    shutil.copyfile(MODELING_FILE, folder / MODELING_FILE.name)
    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    save_file(state, folder / WEIGHTS_NAME, metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return share(folder)


def load_pruned(folder, attn_implementation: str = "sdpa"):
    """Rebuild a model written by ``save_pruned``: the config's shapes, the recorded heads pruned, the weights."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / WEIGHTS_NAME).is_file() or not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} must hold config.json and {WEIGHTS_NAME} (written by save_pruned)")
    config = AutoConfig.from_pretrained(folder)
    if hasattr(config, "auto_map"):  # bab rebuilds the shapes itself; the model in memory is plain transformers
        del config.auto_map
    recorded = getattr(config, KEPT_HEADS_KEY, None)
    model = classifier_from_config(config, attn_implementation=attn_implementation)
    if recorded is not None:
        setattr(model.config, KEPT_HEADS_KEY, None)  # prune from the full model built by the config
        prune_heads(model, recorded)
    model.load_state_dict(load_file(folder / WEIGHTS_NAME), strict=True)
    return model.eval()

