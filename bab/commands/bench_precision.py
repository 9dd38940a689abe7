"""``bench precision``: one training step of each notebook's model at its quick shape, in float32 and under bfloat16
autocast (``bab.core.precision``), interleaved on one thread, the speed-up with its interval and both losses.

    python -m bab bench precision [--only 01,07] [--repeats 5]

The custom encoders (01, 02) train on a batch of their data; the others time their quick profile's shape and batch
on random inputs (MiniLM and SmolLM2 with their packaged weights; the ViT and the from-scratch GPT-2 freshly built).
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from bab.commands.common import WIDE, DefaultsFormatter, add_repeat_arguments, flat, repeats_of


def _custom_encoder(study_name: str):
    from bab.commands.bench import quick_training_case

    model, ids, labels = quick_training_case(study_name)

    def loss_of(m):
        out = m(ids, budget=0.5, mode="soft")
        return F.cross_entropy(out.logits, labels) + out.cost

    return model, loss_of


def _minilm():
    from bab.experiments.profiles import get_profile
    from bab.heads.hf_encoder import load_classifier

    profile = get_profile("bert_ag_news", "quick")
    model = load_classifier(profile.model, num_labels=4)[0]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (profile.warm.batch_size, profile.max_len), generator=g)
    labels = torch.randint(0, 4, (len(ids),), generator=g)
    return model, lambda m: m(input_ids=ids, labels=labels).loss


def _vit():
    from bab.experiments.profiles import get_profile
    from bab.sparsifiner.vit import ViTClassifierConfig, build_vit

    profile = get_profile("vit_sparsifiner", "quick")
    config = ViTClassifierConfig(**profile.model)
    torch.manual_seed(0)
    model = build_vit(config)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(profile.dense.batch_size, config.num_channels, config.image_size, config.image_size,
                         generator=g)
    labels = torch.randint(0, config.num_classes, (len(images),), generator=g)
    return model, lambda m: F.cross_entropy(m(images).logits, labels)


def _decoder(experiment: str):
    from bab.experiments.profiles import get_profile

    profile = get_profile(experiment, "quick")
    if experiment == "gpt2_context_pruning":
        from bab.experiments.context_pruning import ContextPruningStudy

        study = ContextPruningStudy(profile, progress=False)
        model, train = study.new_model(), profile.dense
    else:
        from bab.context.pretrained import load_hf_decoder

        model, train = load_hf_decoder(profile.source)[0], profile.finetune
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (train.batch_size, train.context), generator=g)
    return model, lambda m: m(input_ids=ids, labels=ids, use_cache=False).loss


CASES = {  # notebook -> (what is timed, how to build it)
    "01": ("custom encoder, synthetic task", lambda: _custom_encoder("synthetic")),
    "02": ("custom encoder, AG News", lambda: _custom_encoder("ag_news_custom")),
    "03": ("MiniLM, AG News shape (also 04's)", _minilm),
    "05": ("ViT, 50 tokens", _vit),
    "06": ("GPT-2 from scratch", lambda: _decoder("gpt2_context_pruning")),
    "07": ("SmolLM2-135M", lambda: _decoder("pretrained_context_pruning")),
}


def add_bench_precision(sub) -> None:
    p = sub.add_parser("precision", help="a training step at quick: float32 vs bfloat16 autocast",
                       formatter_class=DefaultsFormatter,
                       description="One training step (forward, loss, backward) of each notebook's model at its "
                                   "quick shape, float32 against bfloat16 autocast, interleaved on one thread.")
    p.add_argument("--only", default=",".join(CASES),
                   help=f"comma-separated notebooks among {', '.join(CASES)}")
    add_repeat_arguments(p, warmup=2, repeats=5)
    p.set_defaults(run=_bench_precision, errors=(ValueError, FileNotFoundError))


def _bench_precision(args) -> int:
    from bab.core.precision import native_bfloat16, precision_step_bench

    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in CASES]
    if unknown or not chosen:
        raise ValueError(f"--only takes notebooks among {', '.join(CASES)}, got {args.only!r}")
    cases = {f"{n} {CASES[n][0]}": CASES[n][1]() for n in chosen}
    table = precision_step_bench(cases, warmup=args.warmup, repeats=repeats_of(args, args.repeats))
    native = "native bfloat16" if native_bfloat16() else "NO native bfloat16 (emulated: expect a slow-down)"
    print(f"one training step at quick, float32 vs bfloat16 autocast; CPU with {native}; 1 thread, interleaved, "
          f"median after {args.warmup} warm-up")
    with pd.option_context(*flat(WIDE), "display.precision", 3):
        print(table.to_string(index=False))
    print("speed-up = float32 time / bfloat16 time, 95% interval over the paired repeats; weights, gradients and "
          "the optimiser stay float32 (bab.core.precision)")
    return 0
