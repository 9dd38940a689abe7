"""``bench generation``: context-pruned decoding through ``model.generate()`` against dense (the in-place
``StaticCache`` and the ``DynamicCache``), on notebook 06's or 07's checkpoints: prefill, decode and end to end,
each with its interval and analytic limit, and the KV cache's bytes (``bab.context.bench``).

    python -m bab bench generation [--model smollm2] [--prompt 2048] [--new-tokens 256] [--batch 8]
"""

from __future__ import annotations

import pandas as pd

from bab.commands.common import WIDE, DefaultsFormatter, add_target_arguments, flat, repeats_of
from bab.core.errors import checking

GENERATION_MODELS = {  # --model -> (the notebook's experiment, what it is)
    "gpt2": ("gpt2_context_pruning", "notebook 06's small GPT-2 (trained here)"),
    "smollm2": ("pretrained_context_pruning", "notebook 07's pretrained SmolLM2-135M"),
}


def add_bench_generation(sub) -> None:
    p = sub.add_parser("generation", help="context-pruned decoding (KV cache drops tokens) vs dense, on notebook "
                                          "06's or 07's checkpoints (fine-tuned if not cached)",
                       formatter_class=DefaultsFormatter)
    p.add_argument("--model", choices=sorted(GENERATION_MODELS), default="gpt2",
                   help="; ".join(f"{k}: {v[1]}" for k, v in GENERATION_MODELS.items()))
    p.add_argument("--profile", default="quick", help="whose checkpoints (smoke, quick, record, paper)")
    p.add_argument("--prompt", type=int, nargs="+", default=None,
                   help="prompt lengths (default: the profile's; smollm2: 1024 2048)")
    p.add_argument("--gamma", type=float, nargs="+", default=None,
                   help="which specialists (default: gpt2 every gamma of the profile, smollm2 the largest)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens generated per prompt (default: the profile's)")
    p.add_argument("--batch", type=int, default=None, help="prompts decoded together (default: the profile's)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved timed repeats, the median reported (default: the profile's)")
    add_target_arguments(p)
    p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default: the profile's)")
    p.set_defaults(run=_bench_generation)


def _bench_generation(args) -> int:
    from bab.context.bench import DYNAMIC, speedup_intervals
    from bab.experiments.profiles import get_profile

    experiment, what = GENERATION_MODELS[args.model]
    with checking():
        profile = get_profile(experiment, args.profile)
        if args.model == "smollm2":
            from bab.experiments.pretrained_context import PretrainedContextStudy as Study
        else:
            from bab.experiments.context_pruning import ContextPruningStudy as Study
        study = Study(profile, progress=True)
        repeats = (None if args.repeats is None and args.interval_target is None
                   else repeats_of(args, profile.bench_repeats))
    # a specialist not in the run cache is fine-tuned here: work, whose errors are failures
    models = None if args.gamma is None else {f"gamma={g:g}": study.pruned(g)[0] for g in args.gamma}
    print(f"{what}, profile {profile.name}")
    for prompt in args.prompt or profile.bench_prompts:
        table = study.throughput(models, prompt_len=prompt, new_tokens=args.new_tokens, batch=args.batch,
                                 repeats=repeats, warmup=args.warmup)
        a = table.attrs
        print(f"\nbatch {a['batch']}, prompt {a['prompt']} tokens, {a['new_tokens']} new tokens; 1 thread, "
              f"median of {a['repeats']} interleaved repeats after {a['warmup']} warm-up")
        with pd.option_context(*flat(WIDE)):
            print(table.round(3).to_string())
            for baseline in (a["baseline"], DYNAMIC):
                print(f"\nspeed-up over {baseline!r}, 95% interval over the paired repeats"
                      + (", beside the analytic limit:" if baseline == a["baseline"] else ":"))
                print(speedup_intervals(table, baseline).round(3).to_string())
    print(f"\n{a['baseline']!r}: the dense model with transformers' in-place StaticCache; {DYNAMIC!r}: with its "
          "DynamicCache (concatenated at every step). Limits: decode, dense bytes read per step (weights + live "
          "keys/values/interaction keys) over ours, what a memory-bound step would reach; prefill, dense prompt "
          "FLOPs over ours (the interactions add theirs); end to end, both weighted by dense's own prefill and decode "
          "times. memory_ratio: DynamicCache's KV bytes over ours at the end")
    return 0
