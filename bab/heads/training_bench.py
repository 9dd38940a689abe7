"""What ``math_backend_attention`` saves in training: one training step of a custom encoder (soft gates at b = 0.5:
forward, cross-entropy + cost, backward) through torch's own ``scaled_dot_product_attention`` (which takes its math
backend for such steps: a learned relative bias, dropout) against ``math_backend_attention``, interleaved in one
process on one thread (``bab.core.timing``). The two must give the same loss and gradients bit for bit; the table
says whether they did. The command times notebook 01's and 02's encoders at their quick shapes, batch size and data
(``bab.commands.bench``):

    python -m bab bench heads --training
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import torch
import torch.nn.functional as F

from bab.core.timing import Repeats, single_thread, speedup_columns, time_side_by_side
from bab.heads.encoder import EncoderClassifier, MultiHeadSelfAttention, math_backend_attention, sdpa

ATTENTIONS = {"SDPA": sdpa, "math_backend_attention": math_backend_attention}


def training_step(model: EncoderClassifier, ids, labels, attention) -> dict:
    """One soft step at b = 0.5 with ``attention`` where SDPA would take its math backend: {"loss": the loss, name:
    gradient} (gradients cleared first, no optimiser step, the same dropout draws each call)."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadSelfAttention)]
    for layer in layers:
        layer.math_attention = attention  # an instance attribute: this model's layers only, and no self
    try:
        model.train().zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with torch.enable_grad():  # the timing protocol runs its callables under no_grad
            out = model(ids, budget=0.5, mode="soft")
            loss = F.cross_entropy(out.logits, labels) + out.cost
            loss.backward()
    finally:
        for layer in layers:
            del layer.math_attention  # back to the class's math_backend_attention
    return {"loss": loss.detach(), **{n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}}


def training_step_bench(cases: dict, warmup: int = 2, repeats: int | Repeats = 10) -> pd.DataFrame:
    """``cases``: {name: (EncoderClassifier, input ids [B, T], labels [B])}. One row per case: the median step time
    through each attention (ms), the speed-up with its 95% interval over the paired repeats, how many repeats were
    timed, and whether loss and gradients were equal bit for bit."""
    rows = []
    with single_thread():
        for name, (model, ids, labels) in cases.items():
            steps = {label: training_step(model, ids, labels, fn) for label, fn in ATTENTIONS.items()}
            equal = all(torch.equal(a, b) for a, b in zip(*(s.values() for s in steps.values()), strict=True))
            fns = {label: partial(training_step, model, ids, labels, fn) for label, fn in ATTENTIONS.items()}
            timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            rows.append({"case": name, "batch": tuple(ids.shape),
                         **speedup_columns(timing, *ATTENTIONS),
                         "same loss and gradients": equal})
    return pd.DataFrame(rows)
