"""What ``math_backend_attention`` saves in training: one training step of the custom encoder (soft gates at b = 0.5:
forward, cross-entropy + cost, backward) on notebook 01's synthetic task and notebook 02's AG News, at their quick
profiles' model shapes, batch size and data, through torch's own ``scaled_dot_product_attention`` (which takes its
math backend for these steps: the learned relative bias, dropout) against ``math_backend_attention``, interleaved in
one process on one thread (``bab.core.timing``). The two must give the same loss and gradients bit for bit; the table
says whether they did.

    python -m bab bench heads --training
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import torch
import torch.nn.functional as F

from bab.core.statistics import ratio_of_medians
from bab.core.timing import Repeats, single_thread, time_side_by_side
from bab.heads.encoder import EncoderClassifier, MultiHeadSelfAttention, math_backend_attention, sdpa

ATTENTIONS = {"SDPA": sdpa, "math_backend_attention": math_backend_attention}


def quick_training_batch(study_name: str, seed: int = 0):
    """(model, input ids [B, T], labels [B]): a fresh gated encoder of ``study_name`` ("synthetic" or
    "ag_news_custom") at its quick profile and one training batch of its data (AG News: texts of similar length, as
    the quick profile's length-grouped batches)."""
    from bab.experiments.profiles import get_profile

    profile = get_profile(study_name, "quick")
    if study_name == "synthetic":
        from bab.experiments.synthetic import SyntheticExperiment

        study, batch_size = SyntheticExperiment(profile, progress=False), profile.scratch.batch_size
    elif study_name == "ag_news_custom":
        from bab.experiments.text import TextStudy

        study, batch_size = TextStudy(profile, experiment=study_name, progress=False), profile.warm.batch_size
    else:
        raise ValueError(f"study_name must be 'synthetic' or 'ag_news_custom', got {study_name!r}")
    ids, labels = study.splits()["train"].tensors
    generator = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, len(ids) - batch_size, (1,), generator=generator))
    order = ids.ne(study.model_config().pad_id).sum(1).argsort(stable=True)[start:start + batch_size]
    torch.manual_seed(seed)
    return EncoderClassifier(study.model_config("budget")), ids[order], labels[order]


def training_step(model: EncoderClassifier, ids, labels, attention) -> dict:
    """One soft step at b = 0.5 with ``attention`` where SDPA would take its math backend: {"loss": the loss, name:
    gradient} (gradients cleared first, no optimiser step, the same dropout draws each call)."""
    MultiHeadSelfAttention.math_attention = staticmethod(attention)
    try:
        model.train().zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with torch.enable_grad():  # the timing protocol runs its callables under no_grad
            out = model(ids, budget=0.5, mode="soft")
            loss = F.cross_entropy(out.logits, labels) + out.cost
            loss.backward()
    finally:
        MultiHeadSelfAttention.math_attention = staticmethod(math_backend_attention)
    return {"loss": loss.detach(), **{n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}}


def training_step_bench(studies=("synthetic", "ag_news_custom"), warmup: int = 2, repeats: int | Repeats = 10,
                        seed: int = 0) -> pd.DataFrame:
    """One row per study: the median step time through each attention (ms), the speed-up with its 95% interval over
    the paired repeats, how many repeats were timed, and whether loss and gradients were equal bit for bit."""
    rows = []
    with single_thread():
        for name in studies:
            model, ids, labels = quick_training_batch(name, seed)
            steps = {label: training_step(model, ids, labels, fn) for label, fn in ATTENTIONS.items()}
            equal = all(torch.equal(a, b) for a, b in zip(*(s.values() for s in steps.values()), strict=True))
            fns = {label: partial(training_step, model, ids, labels, fn) for label, fn in ATTENTIONS.items()}
            timing = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            before, after = (timing[label] for label in ATTENTIONS)
            speed_up = ratio_of_medians(before.times_ms, after.times_ms)
            rows.append({"study": name, "batch": tuple(ids.shape), "SDPA ms": before.median_ms,
                         "math_backend_attention ms": after.median_ms, "speed-up": speed_up.value,
                         "speed-up low": speed_up.low, "speed-up high": speed_up.high,
                         "repeats": len(before.times_ms), "same loss and gradients": equal})
    return pd.DataFrame(rows)
