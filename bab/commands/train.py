"""``train``: a notebook's trainings into the run cache, resumable.

    python -m bab train decoder --profile paper --gamma 3 [--frozen]   one of notebook 07's fine-tunes
    python -m bab train vit --profile paper heads linformer             notebook 05's trainings
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter, add_decoder_choice, check_decoder_choice


def register(sub) -> None:
    train = sub.add_parser("train", help="a notebook's trainings into the run cache: decoder, vit")
    train_sub = train.add_subparsers(dest="target", required=True, metavar="WHAT")
    _add_train_decoder(train_sub)
    _add_train_vit(train_sub)


def _add_train_decoder(sub) -> None:
    p = sub.add_parser("decoder", help="one of notebook 07's SmolLM2 fine-tunes into the run cache ($BAB_CACHE_DIR), "
                                       "resumed where an interrupted run stopped",
                       formatter_class=DefaultsFormatter)
    add_decoder_choice(p)
    p.set_defaults(run=_train_decoder, errors=(ValueError, FileNotFoundError, OSError))


def _train_decoder(args) -> int:
    from bab.core.threads import set_threads
    from bab.experiments.pretrained_context import PretrainedContextStudy
    from bab.experiments.profiles import get_profile

    profile = get_profile("pretrained_context_pruning", args.profile)
    check_decoder_choice(args, profile)
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
