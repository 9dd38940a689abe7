"""One whole ViT forward by attention core name, for the benches and checks.

The model is transformers' ``ViTForImageClassification`` / ``DeiTForImageClassification`` with Sparsifiner attached
(``bab.sparsifiner.attach``: notebook 05's trained models, or a DeiT-S-shaped one). ``model_view(model)`` gives what
the benches need of it, a ``ModelView``: the forward as ``run(pixels, core, keep) -> (logits, multiply-adds)``, the
layers (transformers' ``ViTLayer`` modules, whose q/k projections hooks can read), the predictors and the input
shape. The whole-model bench (``bab.sparsifiner.model_bench``) and ``bab.sparsifiner.evaluate.fused_logit_check``
run models through it.

``run`` sets the core and keep rate for that one forward (without the predictor's scores or recorded
probabilities, which would add work to the timed forward, and without token pruning) and puts the model's own
settings back after.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bab.sparsifiner.attach import configure, is_attached, predictors, sparsifiner_state
from bab.sparsifiner.attach_tokens import set_token_pruning


@dataclass(frozen=True)
class ModelView:
    """What the benches need of a model with Sparsifiner attached (see the module doc)."""

    model: nn.Module
    layers: nn.ModuleList  # transformers' ViTLayer / DeiTLayer modules, in order
    predictors: list  # each layer's ConnectivityPredictor; empty when the model has none
    image_shape: tuple[int, int, int]  # (C, S, S) of the images the model was built for
    num_tokens: int  # tokens of the unpruned sequence: patches, CLS (and DeiT's distillation token)

    def run(self, pixels: torch.Tensor, core: str, keep: float) -> tuple[torch.Tensor, float]:
        """pixels [B, C, S, S] -> (logits [B, classes], the attention cores' multiply-adds per image)."""
        model, state = self.model, sparsifiner_state(self.model)
        before = dict(core=state.core, keep=state.keep_rate, with_predictor=state.with_predictor,
                      record_probs=state.record_probs)
        pruning = (state.token_keep, state.prune_layers, state.fuse_tokens)
        set_token_pruning(model, None)
        configure(model, core=core, keep=keep, with_predictor=False, record_probs=False)
        try:
            logits = model(pixel_values=pixels).logits
        finally:
            configure(model, **before)
            if pruning[0] is not None:
                set_token_pruning(model, *pruning)
        return logits, state.mhsa_macs()


def model_view(model: nn.Module) -> ModelView:
    """``model`` as a ``ModelView``; a TypeError saying how to attach Sparsifiner otherwise."""
    if not is_attached(model):
        raise TypeError(f"model must be transformers' ViT or DeiT with Sparsifiner attached "
                        f"(bab.sparsifiner.attach.attach(model, ConnectivityConfig(...))), got {type(model).__name__}")
    c, state = model.config, sparsifiner_state(model)
    return ModelView(model, model.base_model.layers, predictors(model), (c.num_channels, c.image_size, c.image_size),
                     state.max_tokens)
