"""``evaluate``: a notebook's slow evaluations into the run cache, ahead of it.

    python -m bab evaluate decoder --profile paper --gamma 3 [--frozen]   notebook 07's evaluations of one decoder
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter, add_decoder_choice, check_decoder_choice


def register(sub) -> None:
    evaluate = sub.add_parser("evaluate", help="a notebook's slow evaluations into the run cache, ahead of it: decoder")
    evaluate_sub = evaluate.add_subparsers(dest="target", required=True, metavar="WHAT")
    _add_evaluate_decoder(evaluate_sub)


def _add_evaluate_decoder(sub) -> None:
    p = sub.add_parser("decoder", help="notebook 07's evaluations of one SmolLM2 decoder (held-out perplexity on each "
                                       "text and the zero-shot tasks; for a --gamma specialist also the static "
                                       "baselines at its sparsity; the budget table for --budgeted) into the run "
                                       "cache ($BAB_CACHE_DIR), where the notebook finds them; never trains",
                       formatter_class=DefaultsFormatter)
    add_decoder_choice(p, pretrained=True)
    p.set_defaults(run=_evaluate_decoder, errors=(ValueError, FileNotFoundError, OSError, LookupError))


def _evaluate_decoder(args) -> int:
    import time

    from bab.core.runs import LoadOnlyRunCache
    from bab.core.threads import set_threads
    from bab.experiments.pretrained_context import PretrainedContextStudy
    from bab.experiments.profiles import get_profile

    profile = get_profile("pretrained_context_pruning", args.profile)
    check_decoder_choice(args, profile)
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
