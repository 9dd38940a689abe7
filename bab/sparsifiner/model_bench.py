"""Whole-model inference speed: transformers' ViT with Sparsifiner attached, its forward with dense attention against
the fused Sparsifiner kernel.

    python -m bab bench sparse --model deit-s --tokens 197,577 --batch-sizes 1,64
    python -m bab bench sparse --model trained          # notebook 05's quick model, from the run cache

Images per second of the whole forward of ``ViTForImageClassification`` with Sparsifiner attached, the core
``dense`` against ``fused`` at each keep rate, interleaved in one process with the ``bab.core.timing`` protocol;
beside each speed-up the analytic limit (whole-model FLOPs dense / fused: ``FlopCounterMode``'s dense count with
the attention cores' multiply-adds replaced by the fused cores') and the cores' share of the dense FLOPs, which
bounds any attention speed-up. Models: ``deit_s_shaped(n)`` (random weights in DeiT-S's shape, the paper's
predictor in the core bench's "realistic" state layer by layer: ``set_realistic_model_state``),
``attached_vit(config)`` for any ``ViTConfig``, or notebook 05's trained model. docs/speed.md, "Whole-model
inference: dense against fused", has the protocol and what it shows.
"""

from __future__ import annotations

import copy
import math

import pandas as pd
import torch
from torch import nn
from transformers import ViTConfig, ViTForImageClassification

from bab.core.timing import Repeats, count_flops, single_thread, time_side_by_side
from bab.sparsifiner.attach import attach
from bab.sparsifiner.bench import KEEP_RATES, PREDICTOR_STATES, set_realistic_state
from bab.sparsifiner.fused import fused_available
from bab.sparsifiner.predictor import ConnectivityConfig, num_connections, validate_keep_rate
from bab.sparsifiner.whole_model import ModelView, model_view

BATCH_SIZES = (1, 64)
# DeiT-S (Touvron et al. 2021): 16x16 patches, width 384, 6 heads of 64, 12 layers, MLP 1536, ImageNet's classes
# (ViTConfig's names; its dropouts default to 0, as the attached attention requires)
DEIT_S = dict(patch_size=16, num_channels=3, hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
              intermediate_size=1536, num_labels=1000)
# the predictor of the paper's DeiT-S runs (and of the core bench): 32 down-projected tokens, tau 0.05, W_up
# pruned below 0.01, the paper's text for the other options
DEIT_S_PREDICTOR = dict(n_down=32, tau=0.05, up_prune=1e-2)


def patch_grid(n_tokens: int) -> int:
    """The side g of a g x g patch grid with n_tokens = g * g + 1 (the CLS token); a ValueError otherwise."""
    side = math.isqrt(max(int(n_tokens) - 1, 0))
    if isinstance(n_tokens, bool) or int(n_tokens) != n_tokens or side < 1 or side * side + 1 != n_tokens:
        below, above = side * side + 1, (side + 1) ** 2 + 1
        raise ValueError(f"n_tokens must be g * g + 1 (a g x g patch grid plus CLS), e.g. 197 (14 x 14), 577 "
                         f"(24 x 24) or 1025 (32 x 32); got {n_tokens!r}, nearest {below} or {above}")
    return side


def random_pixels(config, batch_size: int, seed: int = 0) -> torch.Tensor:
    """Standard-normal images [batch_size, C, S, S] in the shape ``config`` takes (a ``ViTConfig``: C
    ``num_channels``, S ``image_size``)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch_size, config.num_channels, config.image_size, config.image_size, generator=g)


@torch.no_grad()
def layer_queries_keys(model: nn.Module, pixels: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's per-head queries and keys (q, k [B, H, n, d]) in a dense forward of ``pixels``, read by forward
    hooks on the q and k projections (so the model's own forward produces them). ``model``: transformers' ViT with
    Sparsifiner attached."""
    view = model_view(model)
    B = pixels.shape[0]
    captured, hooks = [], []

    def keeper(heads: int):
        def keep(module, inputs, output):  # output [B, n, H * d]
            captured.append(output.view(B, output.shape[1], heads, -1).transpose(1, 2))
        return keep

    for layer in view.layers:
        attention = layer.attention
        hooks += [proj.register_forward_hook(keeper(attention.num_attention_heads))
                  for proj in (attention.q_proj, attention.k_proj)]
    try:
        model.eval()
        view.run(pixels, "dense", 1.0)
    finally:
        for hook in hooks:
            hook.remove()
    return list(zip(captured[0::2], captured[1::2], strict=True))  # each layer calls q_proj before k_proj


def set_realistic_model_state(model: nn.Module, pixels: torch.Tensor, seed: int = 0) -> list[dict]:
    """Give every layer's predictor (in place) the sparsity of a trained one (``bab.sparsifiner.bench.
    set_realistic_state``: ~90% of the basis pruned, W_down scaled until ~87% of A_down falls at or below tau)
    on the queries and keys that layer sees for ``pixels`` in a dense forward. A freshly initialised predictor
    has an all-zero basis from n = 250 on, which makes the selection degenerate (contiguous keys, constant
    ranking rows) and its timing meaningless. ``model``: transformers' ViT with Sparsifiner attached. Returns each
    layer's sparsities {"basis", "coefficients"}."""
    view = model_view(model)
    if not view.predictors:
        raise ValueError("the model has no connectivity predictors: attach(model, ConnectivityConfig(...)) with a "
                         "config, not None (notebook 05's: build_vit(ViTClassifierConfig(connectivity=...)))")
    return [set_realistic_state(predictor, q, k, seed=seed + i)
            for i, (predictor, (q, k)) in enumerate(zip(view.predictors, layer_queries_keys(model, pixels),
                                                        strict=True))]


def attached_vit(config: ViTConfig, predictor_state: str = "realistic", seed: int = 0,
                 **predictor_options) -> ViTForImageClassification:
    """transformers' ``ViTForImageClassification(config)`` with random weights (seeded by ``seed``) and Sparsifiner
    attached: a connectivity predictor per layer (``DEIT_S_PREDICTOR``, overridden by ``predictor_options``: any
    ``ConnectivityConfig`` field), core ``dense``. ``predictor_state``: "realistic" (``set_realistic_model_state`` on
    one random image) or "init" (as built). In eval mode."""
    if predictor_state not in PREDICTOR_STATES:
        raise ValueError(f"predictor_state must be one of {PREDICTOR_STATES}, got {predictor_state!r}")
    connectivity = ConnectivityConfig(**{**DEIT_S_PREDICTOR, **predictor_options})
    torch.manual_seed(seed)
    # attaching switches the config's attention implementation: the caller's config stays as it was
    model = attach(ViTForImageClassification(copy.deepcopy(config)).eval(), connectivity, core="dense")
    if predictor_state == "realistic":
        set_realistic_model_state(model, random_pixels(config, 1, seed), seed)
    return model


def deit_s_shaped(n_tokens: int = 197, predictor_state: str = "realistic", seed: int = 0,
                  **predictor_options) -> ViTForImageClassification:
    """``attached_vit`` in DeiT-S's shape (``DEIT_S``) on images of 16 g x 16 g pixels, so that n_tokens = g * g + 1
    (197: 224 x 224, 577: 384 x 384, 1025: 512 x 512)."""
    side = patch_grid(n_tokens)
    return attached_vit(ViTConfig(image_size=16 * side, **DEIT_S), predictor_state, seed, **predictor_options)


def describe(model: nn.Module) -> str:
    """The model's shape in words: image and patch size, n, layers x heads, width, MLP."""
    view, c = model_view(model), model.config
    layers, heads, patch, mlp = c.num_hidden_layers, c.num_attention_heads, c.patch_size, c.intermediate_size
    side = view.image_shape[-1]
    return (f"{side}x{side} images in {patch}x{patch} patches (n = {view.num_tokens}), {layers} layers x {heads} "
            f"heads, width {c.hidden_size}, MLP {mlp}")


@torch.no_grad()
def whole_model_flops(model: nn.Module, pixels: torch.Tensor, keep_rates) -> dict:
    """FLOPs per image of the whole forward on ``pixels`` [B, C, S, S] (see the module doc): {"dense": counted by
    FlopCounterMode, "attention": the dense attention cores' share (2 x the multiply-adds they report), keep rate:
    the dense count with that share replaced by 2 x the fused cores' reported multiply-adds}. Where the fused
    kernel is not built, the torch sparse core reports the same multiply-adds (both count the same connections and
    coefficients)."""
    view = model_view(model)
    model.eval()
    reported = {}

    def dense():
        reported["dense"] = view.run(pixels, "dense", 1.0)[1]

    flops = {"dense": count_flops(dense) / pixels.shape[0], "attention": 2.0 * reported["dense"]}
    core = "fused" if fused_available() else "sparse"
    for rate in keep_rates:
        flops[rate] = flops["dense"] - flops["attention"] + 2.0 * view.run(pixels, core, rate)[1]
    return flops


def _batch(pool: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The first ``batch_size`` images of ``pool``, cycling through it when it holds fewer."""
    return pool[torch.arange(batch_size) % pool.shape[0]].contiguous()


def _check_inputs(model, pixels, keep_rates, batch_sizes) -> tuple[ModelView, list[float], list[int]]:
    view = model_view(model)
    if not view.predictors:
        raise ValueError("the fused core needs connectivity predictors: attach(model, ConnectivityConfig(...)), "
                         "e.g. deit_s_shaped(197) (notebook 05's: build_vit(ViTClassifierConfig(connectivity=...)))")
    sizes = list(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be whole numbers >= 1, e.g. (1, 64); got {batch_sizes!r}")
    expected = view.image_shape
    if pixels is not None and (pixels.dim() != 4 or tuple(pixels.shape[1:]) != expected or len(pixels) == 0):
        raise ValueError(f"pixels must be images [N, C, S, S] = [N, {', '.join(map(str, expected))}] for this model, "
                         f"got {tuple(pixels.shape)}")
    return view, [validate_keep_rate(r) for r in keep_rates], sizes


def bench_model(model: nn.Module, keep_rates=KEEP_RATES, batch_sizes=BATCH_SIZES,
                pixels: torch.Tensor | None = None, warmup: int = 1, repeats: int | Repeats = 3,
                seed: int = 0) -> pd.DataFrame:
    """Images per second of the whole forward of ``model`` (transformers' ViT or DeiT with Sparsifiner attached),
    dense against fused at each keep rate, per batch size: one row per (batch size, keep rate)
    with the dense and fused medians side by side, the measured speed-up (dense time / fused time), the analytic
    limit (whole-model FLOPs dense / fused) and the attention cores' share of the dense FLOPs. ``pixels``: the
    images to time, [N, C, S, S] (a batch of B takes the first B, cycling when N < B; real images matter for a
    trained predictor, whose connections depend on them); default standard-normal images. The fused columns are
    NaN where the kernel cannot be built. Dense is timed once per batch size and repeated on its rows, with the
    number of repeats timed (``repeats``: a count, or ``bab.core.timing.Repeats`` with a target for the speed-ups'
    intervals). An attached model's own core and keep rate are unchanged afterwards."""
    view, keep_rates, batch_sizes = _check_inputs(model, pixels, keep_rates, batch_sizes)
    model.eval()
    pool = pixels if pixels is not None else random_pixels(model.config, max(batch_sizes), seed)
    n = view.num_tokens
    fused = fused_available()
    rows = []
    with torch.no_grad(), single_thread():
        flops = whole_model_flops(model, pool[:1], keep_rates)
        for size in batch_sizes:
            x = _batch(pool, size)
            fns = {"dense": lambda x=x: view.run(x, "dense", 1.0)}
            if fused:
                for rate in keep_rates:
                    fns[f"fused {rate}"] = lambda x=x, rate=rate: view.run(x, "fused", rate)
            timings = time_side_by_side(fns, warmup=warmup, repeats=repeats)
            dense_ms = timings["dense"].median_ms
            for rate in keep_rates:
                fused_ms = timings[f"fused {rate}"].median_ms if fused else math.nan
                rows.append({
                    "tokens": n, "batch": size, "keep_rate": rate, "k": num_connections(rate, n),
                    "dense ms": dense_ms, "fused ms": fused_ms,
                    "dense images/s": 1e3 * size / dense_ms, "fused images/s": 1e3 * size / fused_ms,
                    "speed-up": dense_ms / fused_ms, "analytic limit": flops["dense"] / flops[rate],
                    "attention share": flops["attention"] / flops["dense"],
                    "dense GFLOPs/image": flops["dense"] / 1e9, "fused GFLOPs/image": flops[rate] / 1e9,
                    "repeats": len(timings["dense"].times_ms),
                })
    return pd.DataFrame(rows)
