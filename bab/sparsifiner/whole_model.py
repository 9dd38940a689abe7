"""One whole ViT forward by attention core name, for either kind of Sparsifiner model the benches and checks take.

Two kinds of model carry Sparsifiner: transformers' ``ViTForImageClassification`` / ``DeiTForImageClassification``
with it attached (``bab.sparsifiner.attach``; the core and keep rate are settings on the model), and bab's own
``ViTClassifier`` (``bab.sparsifiner.vit``; the core and keep rate are forward options), which notebook 05's
trained model still is. ``model_view(model)`` gives both one face, a ``ModelView``: the forward as
``run(pixels, core, keep) -> (logits, multiply-adds)``, the layers (both are transformers' ``ViTLayer`` modules, so
hooks on their q/k projections work alike), the predictors and the input shape. The whole-model bench
(``bab.sparsifiner.model_bench``) and ``bab.sparsifiner.evaluate.fused_logit_check`` run models through it.

On an attached model ``run`` sets the core and keep rate for that one forward (without the predictor's scores or
recorded probabilities, which would add work to the timed forward) and puts the model's own settings back after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bab.sparsifiner.attach import configure, is_attached, predictors, sparsifiner_state
from bab.sparsifiner.vit import ViTClassifier

# (pixels [B, C, S, S], core name, keep rate) -> (logits [B, classes], the attention cores' multiply-adds per image)
Run = Callable[[torch.Tensor, str, float], tuple[torch.Tensor, float]]


@dataclass(frozen=True)
class ModelView:
    """What the benches need of a model, whichever kind it is (see the module doc)."""

    kind: str  # "attached" (transformers' ViT / DeiT with Sparsifiner) or "ViTClassifier" (bab's own)
    run: Run
    layers: nn.ModuleList  # transformers' ViTLayer / DeiTLayer modules, in order
    predictors: list  # each layer's ConnectivityPredictor; empty when the model has none
    image_shape: tuple[int, int, int]  # (C, S, S) of the images the model was built for
    num_tokens: int  # tokens of the unpruned sequence: patches, CLS (and DeiT's distillation token)


def model_view(model: nn.Module) -> ModelView:
    """``model`` as a ``ModelView``; a TypeError naming the two kinds otherwise."""
    if isinstance(model, ViTClassifier):
        c = model.config
        return ModelView("ViTClassifier", _classifier_run(model), model.layers, list(model.predictors or []),
                         (c.num_channels, c.image_size, c.image_size), c.num_tokens)
    if is_attached(model):
        c, state = model.config, sparsifiner_state(model)
        return ModelView("attached", _attached_run(model), model.base_model.layers, predictors(model),
                         (c.num_channels, c.image_size, c.image_size), state.max_tokens)
    raise TypeError(f"model must be transformers' ViT or DeiT with Sparsifiner attached "
                    f"(bab.sparsifiner.attach.attach(model, ConnectivityConfig(...))) or a bab ViTClassifier, got "
                    f"{type(model).__name__}")


def _classifier_run(model: ViTClassifier) -> Run:
    def run(pixels, core, keep):
        out = model(pixels, attention=core, keep_rate=keep)
        return out.logits, out.mhsa_macs

    return run


def _attached_run(model: nn.Module) -> Run:
    state = sparsifiner_state(model)

    def run(pixels, core, keep):
        before = dict(core=state.core, keep=state.keep_rate, with_predictor=state.with_predictor,
                      record_probs=state.record_probs)
        configure(model, core=core, keep=keep, with_predictor=False, record_probs=False)
        try:
            logits = model(pixel_values=pixels).logits
        finally:
            configure(model, **before)
        return logits, state.mhsa_macs()

    return run
