"""Timing protocol and cost model: measured speed against dense in the same process.

Protocol (METHOD_NOTES.md, "Timing"): pre-built batches, ``torch.no_grad()``, ``eval()``, one
intra-op and one inter-op thread, warm-up passes, then the median of repeated timings with the
dense and the sparse model interleaved so drift hits both alike. Beside the measured ratio we
print the analytic limit: dense FLOPs / sparse FLOPs, both counted by ``FlopCounterMode`` on the
very forward passes we time (so it is the limit for exactly the heads that were skipped).

    python -m bab.bench custom --budget 0.5
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

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
) -> dict:
    """Dense vs hard-skipping custom encoder at ``budget``: one process, one thread, same inputs."""
    from bab.models.encoder import EncoderClassifier, EncoderConfig

    budget = validate_budget(budget)
    torch.manual_seed(seed)
    config = EncoderConfig(vocab_size=vocab_size, num_classes=4, max_len=seq_len, d_model=d_model,
                           num_heads=num_heads, num_layers=num_layers, d_ff=d_ff, gates="budget")
    model = EncoderClassifier(config).eval()
    with torch.no_grad():  # random, distinct head logits so the top-k at this budget is a real choice
        model.gates.theta.copy_(torch.randn_like(model.gates.theta))
    input_ids = torch.randint(1, vocab_size, (batch_size, seq_len))
    mask = model.head_mask_for(budget)

    def dense():
        return model(input_ids, mode="dense")

    def skip():
        return model(input_ids, mode="skip", head_mask=mask)

    with torch.no_grad(), single_thread():
        torch.testing.assert_close(skip().logits, model(input_ids, mode="hard", head_mask=mask).logits,
                                   rtol=1e-4, atol=1e-4)
        flops = {"dense": count_flops(dense), "skip": count_flops(skip)}
        timings = time_side_by_side({"dense": dense, "skip": skip}, warmup=warmup, repeats=repeats)
    return {
        "budget": budget,
        "heads_kept": int(mask.sum()),
        "heads_total": mask.numel(),
        "dense_ms": timings["dense"].median_ms,
        "skip_ms": timings["skip"].median_ms,
        "measured_speedup": timings["dense"].median_ms / timings["skip"].median_ms,
        "analytic_speedup": flops["dense"] / flops["skip"],
        "dense_gflops": flops["dense"] / 1e9,
        "skip_gflops": flops["skip"] / 1e9,
        "shape": f"batch {batch_size} x len {seq_len}, d_model {d_model}, {num_layers} layers x {num_heads} heads",
        "repeats": repeats,
        "warmup": warmup,
    }


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bab.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="target", required=True)
    custom = sub.add_parser("custom", help="custom word-level encoder: dense vs hard head skipping")
    custom.add_argument("--budget", type=float, default=0.5, help="fraction of heads kept, in (0, 1]")
    custom.add_argument("--batch-size", type=int, default=64)
    custom.add_argument("--seq-len", type=int, default=128)
    custom.add_argument("--d-model", type=int, default=256)
    custom.add_argument("--num-heads", type=int, default=8)
    custom.add_argument("--num-layers", type=int, default=4)
    custom.add_argument("--d-ff", type=int, default=512)
    custom.add_argument("--warmup", type=int, default=5)
    custom.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        result = bench_custom(
            args.budget, batch_size=args.batch_size, seq_len=args.seq_len, d_model=args.d_model,
            num_heads=args.num_heads, num_layers=args.num_layers, d_ff=args.d_ff,
            warmup=args.warmup, repeats=args.repeats,
        )
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    print(format_custom(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
