"""Whole-model inference speed: a ``ViTClassifier`` forward with dense attention against the fused Sparsifiner kernel.

    python -m bab bench sparse --model deit-s --tokens 197,577 --batch-sizes 1,64
    python -m bab bench sparse --model trained          # notebook 05's quick model, from the run cache

``bench sparse`` without ``--model`` times one attention core (``bab.sparsifiner.bench``), where the paper's
speed claims live. A user runs the whole model: the patch embedding, every layer's layer norms, q/k/v/o
projections and MLP, and the classifier are the same in both variants, so only the attention cores' share of
the time can shrink. This bench times that whole forward, images per second, dense
(``F.scaled_dot_product_attention``) and fused (``attention="fused"``: predictor, top-k and sparse attention in
one C++ kernel) at each keep rate, side by side in one process with the ``bab.core.timing`` protocol (one
thread, ``no_grad``, warm-up, median of interleaved repeats).

The analytic limit beside each measured speed-up is whole-model FLOPs dense / fused. ``FlopCounterMode`` counts
the dense forward (matrix products and the CPU SDPA kernel, 2 FLOPs per multiply-add); it cannot see inside the
fused kernel, so the fused count is the dense count with the attention cores' share (2 x the model's
``dense_mhsa_macs``) replaced by 2 x the multiply-adds the fused cores report in the forward's output
(``mhsa_macs``: attention over the k kept keys, the predictor's down-projection and sparse up-projection). Like
the core bench's limit it has no cost for selecting the k keys or gathering their rows, and the "attention
share" column (the cores' fraction of the dense model's FLOPs) bounds what any attention speed-up can give.

Models: ``deit_s_shaped(n)``, random weights in DeiT-S's shape with the paper's predictor (n_down 32, tau 0.05,
prune threshold 0.01) set to a trained predictor's sparsity (``set_realistic_model_state``, the core bench's
"realistic" state layer by layer); or notebook 05's trained model (the CLI loads it from the run cache).
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from bab.core.timing import count_flops, single_thread, time_side_by_side
from bab.sparsifiner.bench import KEEP_RATES, PREDICTOR_STATES, set_realistic_state
from bab.sparsifiner.fused import fused_available
from bab.sparsifiner.predictor import num_connections, validate_keep_rate
from bab.sparsifiner.vit import ViTClassifier, ViTClassifierConfig

BATCH_SIZES = (1, 64)
# DeiT-S (Touvron et al. 2021): 16x16 patches, width 384, 6 heads of 64, 12 layers, MLP 1536, ImageNet's classes
DEIT_S = dict(patch_size=16, num_channels=3, hidden_size=384, num_layers=12, num_heads=6, intermediate_size=1536,
              num_classes=1000)
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


def random_pixels(config: ViTClassifierConfig, batch_size: int, seed: int = 0) -> torch.Tensor:
    """Standard-normal images [batch_size, C, S, S] in the shape ``config`` takes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch_size, config.num_channels, config.image_size, config.image_size, generator=g)


@torch.no_grad()
def layer_queries_keys(model: ViTClassifier, pixels: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's per-head queries and keys (q, k [B, H, n, d]) in a dense forward of ``pixels``, read by forward
    hooks on the q and k projections (so the model's own forward produces them)."""
    B, H = pixels.shape[0], model.config.num_heads
    captured, hooks = [], []

    def keep(module, inputs, output):
        captured.append(output.view(B, output.shape[1], H, -1).transpose(1, 2))

    for layer in model.layers:
        hooks += [layer.attention.q_proj.register_forward_hook(keep),
                  layer.attention.k_proj.register_forward_hook(keep)]
    try:
        model.eval()(pixels, attention="dense")
    finally:
        for hook in hooks:
            hook.remove()
    return list(zip(captured[0::2], captured[1::2], strict=True))  # the model calls q_proj before k_proj


def set_realistic_model_state(model: ViTClassifier, pixels: torch.Tensor, seed: int = 0) -> list[dict]:
    """Give every layer's predictor (in place) the sparsity of a trained one (``bab.sparsifiner.bench.
    set_realistic_state``: ~90% of the basis pruned, W_down scaled until ~87% of A_down falls at or below tau)
    on the queries and keys that layer sees for ``pixels`` in a dense forward. A freshly initialised predictor
    has an all-zero basis from n = 250 on, which makes the selection degenerate (contiguous keys, constant
    ranking rows) and its timing meaningless. Returns each layer's sparsities {"basis", "coefficients"}."""
    if model.predictors is None:
        raise ValueError("the model has no connectivity predictors: build it with ViTClassifierConfig(predictor=True)")
    return [set_realistic_state(predictor, q, k, seed=seed + i)
            for i, (predictor, (q, k)) in enumerate(zip(model.predictors, layer_queries_keys(model, pixels),
                                                        strict=True))]


def deit_s_shaped(n_tokens: int = 197, predictor_state: str = "realistic", seed: int = 0,
                  **predictor_options) -> ViTClassifier:
    """A ``ViTClassifier`` with random weights in DeiT-S's shape (``DEIT_S``) and a connectivity predictor per layer
    (``DEIT_S_PREDICTOR``, overridden by ``predictor_options``: any ``ViTClassifierConfig`` predictor field),
    on images of 16 g x 16 g pixels so that n_tokens = g * g + 1 (197: 224 x 224, 577: 384 x 384, 1025: 512 x 512).
    ``predictor_state``: "realistic" (``set_realistic_model_state`` on one random image) or "init" (as built).
    In eval mode."""
    if predictor_state not in PREDICTOR_STATES:
        raise ValueError(f"predictor_state must be one of {PREDICTOR_STATES}, got {predictor_state!r}")
    side = patch_grid(n_tokens)
    config = ViTClassifierConfig(image_size=16 * side, predictor=True, **DEIT_S,
                                 **{**DEIT_S_PREDICTOR, **predictor_options})
    torch.manual_seed(seed)
    model = ViTClassifier(config).eval()
    if predictor_state == "realistic":
        set_realistic_model_state(model, random_pixels(config, 1, seed), seed)
    return model


@torch.no_grad()
def whole_model_flops(model: ViTClassifier, pixels: torch.Tensor, keep_rates) -> dict:
    """FLOPs per image of the whole forward on ``pixels`` [B, C, S, S] (see the module doc): {"dense": counted by
    FlopCounterMode, "attention": the dense attention cores' share (2 x dense_mhsa_macs), keep rate: the dense
    count with that share replaced by 2 x the fused cores' reported multiply-adds}. Where the fused kernel is not
    built, the torch sparse core reports the same multiply-adds (both count the same connections and coefficients)."""
    model.eval()
    dense = count_flops(lambda: model(pixels, attention="dense")) / pixels.shape[0]
    attention = 2.0 * model.dense_mhsa_macs()
    core = "fused" if fused_available() else "sparse"
    flops = {"dense": dense, "attention": attention}
    for rate in keep_rates:
        flops[rate] = dense - attention + 2.0 * model(pixels, attention=core, keep_rate=rate).mhsa_macs
    return flops


def _batch(pool: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The first ``batch_size`` images of ``pool``, cycling through it when it holds fewer."""
    return pool[torch.arange(batch_size) % pool.shape[0]].contiguous()


def _check_inputs(model, pixels, keep_rates, batch_sizes) -> tuple[list[float], list[int]]:
    if not isinstance(model, ViTClassifier):
        raise TypeError(f"model must be a ViTClassifier, got {type(model).__name__}")
    if not model.config.predictor:
        raise ValueError("attention='fused' needs connectivity predictors: build the model with "
                         "ViTClassifierConfig(predictor=True), e.g. deit_s_shaped(197)")
    sizes = list(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be whole numbers >= 1, e.g. (1, 64); got {batch_sizes!r}")
    c = model.config
    expected = (c.num_channels, c.image_size, c.image_size)
    if pixels is not None and (pixels.dim() != 4 or tuple(pixels.shape[1:]) != expected or len(pixels) == 0):
        raise ValueError(f"pixels must be images [N, C, S, S] = [N, {', '.join(map(str, expected))}] for this model, "
                         f"got {tuple(pixels.shape)}")
    return [validate_keep_rate(r) for r in keep_rates], sizes


def bench_model(model: ViTClassifier, keep_rates=KEEP_RATES, batch_sizes=BATCH_SIZES,
                pixels: torch.Tensor | None = None, warmup: int = 1, repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """Images per second of the whole forward, dense against fused at each keep rate, per batch size: one row per
    (batch size, keep rate) with the dense and fused medians side by side, the measured speed-up (dense time /
    fused time), the analytic limit (whole-model FLOPs dense / fused) and the attention cores' share of the
    dense FLOPs. ``pixels``: the images to time, [N, C, S, S] (a batch of B takes the first B, cycling when N < B;
    real images matter for a trained predictor, whose connections depend on them); default standard-normal
    images. The fused columns are NaN where the kernel cannot be built. Dense is timed once per batch size and
    repeated on its rows."""
    keep_rates, batch_sizes = _check_inputs(model, pixels, keep_rates, batch_sizes)
    model.eval()
    pool = pixels if pixels is not None else random_pixels(model.config, max(batch_sizes), seed)
    n = model.config.num_tokens
    fused = fused_available()
    rows = []
    with torch.no_grad(), single_thread():
        flops = whole_model_flops(model, pool[:1], keep_rates)
        for size in batch_sizes:
            x = _batch(pool, size)
            fns = {"dense": lambda x=x: model(x, attention="dense")}
            if fused:
                for rate in keep_rates:
                    fns[f"fused {rate}"] = lambda x=x, rate=rate: model(x, attention="fused", keep_rate=rate)
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
                })
    return pd.DataFrame(rows)
