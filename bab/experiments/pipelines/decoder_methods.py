"""The rows notebooks 06 and 07 report, declared once for any decoder with dynamic context pruning."""

from __future__ import annotations

from bab.experiments.methods import methods


def context_pruning_methods(experiment: str, ablations: bool = True, eviction: bool = False):
    """The rows notebooks 06 and 07 report: (attribute, method name, mechanism, budget kind, origin[, settings,
    value]).
    Specialists are told apart by gamma; the headline row is the specialist closest to 80% pruned (its note
    names the gamma)."""
    return methods(
        experiment,
        ("dense", "dense", "none", "dense", "paper"),
        # the same fine-tune without interactions, where the profile fine-tunes the whole model: the like-for-like
        # reference of the fine-tunes, which also adapt to the training text
        ("dense_finetuned", "dense fine-tune, same protocol", "none", "dense", "ours"),
        ("specialist", "context pruning", "context tokens", "none", "paper", ("gamma",)),
        ("headline", "context pruning, ~80% of context pruned", "context tokens", "fraction", "paper"),
        ("budgeted", "budget-conditioned context pruning", "context tokens", "fraction", "ours"),
        # the same protocol with the pretrained weights frozen (only the interactions trained), where the profile
        # fine-tunes the whole model: what fine-tuning the weights buys
        ("frozen", "context pruning, pretrained weights frozen", "context tokens", "none", "ours", ("gamma",)),
        # the interactions' initial values of the official code (bias 5, no q/k bias terms) beside ours
        ("init_ablation", "context pruning, official initial values", "context tokens", "none", "ours",
         ("gamma",)),
        # zero-shot tasks built from held-out text (bab.context.zero_shot): accuracy % with its 95% interval;
        # gamma 0 and weights "pretrained" is the dense model
        ("zero_shot", "zero-shot task accuracy", "context tokens", "none", "paper", ("task", "weights", "gamma")),
        # the same tasks on the budget-conditioned model at a requested budget (one checkpoint, any fraction kept)
        ("zero_shot_budgeted", "zero-shot task accuracy, budget-conditioned", "context tokens", "fraction", "ours",
         ("task",)),
        ("static", "static context mask", "context tokens", "none", "baseline", ("kind", "gamma")),
        # the same masks fine-tuned under the mask with the specialists' data, steps and recipe (where the protocol
        # freezes the decoder's weights there is nothing to fine-tune, and the row is the untouched decoder's)
        ("static_finetuned", "static context mask, fine-tuned", "context tokens", "none", "baseline",
         ("kind", "gamma")),
        *([("ablation", "context pruning ablation", "context tokens", "none", "ours", ("ablation", "irreversible"))]
          if ablations else []),
        # training-free KV eviction on the dense decoder at the fraction the ~80% specialist keeps
        *([("eviction", "training-free KV eviction", "context tokens", "fraction", "baseline", ("policy", "text")),
           ("eviction_zero_shot", "zero-shot task accuracy, training-free KV eviction", "context tokens", "fraction",
            "baseline", ("task", "policy"))] if eviction else []),
        # which kinds of tokens the ~80% specialist drops, per held-out text: one row per kind
        ("token_kinds", "dropped token kinds", "context tokens", "none", "paper", ("kind", "text"),
         "% of the kind's (later query, layer) pairs pruned"),
    )
