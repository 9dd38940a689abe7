"""``bench precision``: one training step of each notebook's model at its quick shape, in float32 and under bfloat16
autocast (``bab.core.precision``), interleaved on one thread, the speed-up with its interval and both losses.

    python -m bab bench precision [--only 01,07] [--repeats 5]

The cases are ``bab.commands.quick_cases.PRECISION_CASES``.
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter, add_repeat_arguments, print_table, repeats_of
from bab.commands.quick_cases import PRECISION_CASES as CASES
from bab.commands.quick_cases import chosen_cases
from bab.core.errors import checking


def add_bench_precision(sub) -> None:
    p = sub.add_parser("precision", help="a training step at quick: float32 vs bfloat16 autocast",
                       formatter_class=DefaultsFormatter,
                       description="One training step (forward, loss, backward) of each notebook's model at its "
                                   "quick shape, float32 against bfloat16 autocast, interleaved on one thread.")
    p.add_argument("--only", default=",".join(CASES),
                   help=f"comma-separated notebooks among {', '.join(CASES)}")
    add_repeat_arguments(p, warmup=2, repeats=5)
    p.set_defaults(run=_bench_precision)


def _bench_precision(args) -> int:
    from bab.core.precision import native_bfloat16, precision_step_bench

    with checking():  # --only and the protocol's counts, before any model is built
        repeats = repeats_of(args, args.repeats)
        chosen = chosen_cases(args.only)
    cases = {f"{n} {CASES[n][0]}": CASES[n][1]() for n in chosen}
    table = precision_step_bench(cases, warmup=args.warmup, repeats=repeats)
    native = "native bfloat16" if native_bfloat16() else "NO native bfloat16 (emulated: expect a slow-down)"
    print_table(f"one training step at quick, float32 vs bfloat16 autocast; CPU with {native}; 1 thread, "
                f"interleaved, median after {args.warmup} warm-up", table,
                "speed-up = float32 time / bfloat16 time, 95% interval over the paired repeats; weights, gradients "
                "and the optimiser stay float32 (bab.core.precision)")
    return 0
