"""The trainings and slow evaluations each notebook's study declares, by step name: what
``python -m bab train NN [STEP ...]`` and ``python -m bab evaluate NN [STEP ...]`` run into the run cache, under the
keys the notebook's own calls use, so a notebook finds them there (resumable, one thread per process, two processes
may share the work: a run one of them trains, the other waits for and loads).

A notebook has steps where its entry in ``bab.experiments.registry.NOTEBOOKS`` names its study class and the
functions (here) that list its steps for a study; ``NOTEBOOKS`` below holds those entries by number. Step names
depend on the profile where the profile decides what exists (notebook 07's gammas, notebook 05's 197-token
variant).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from bab.experiments import registry

# a step's runs: (what it is, the call that trains or evaluates it through the run cache)
Run = tuple[str, Callable[[], object]]


@dataclass(frozen=True)
class Step:
    description: str
    runs: tuple[Run, ...]


@dataclass(frozen=True)
class NotebookSteps:
    """What the commands need of one notebook: its profiles' experiment name, its study class (``module:Class``)
    and the functions listing its training and evaluation steps for a study of it (``module:function``, "" for
    none), each looked up when used."""

    experiment: str
    study_class: str
    training_steps: str
    evaluation_steps: str = ""

    def study(self, profile, **options):
        """The study of ``profile``; a study class that serves several experiments (``BertStudy``) is told which."""
        study_class = _lookup(self.study_class)
        if "experiment" in inspect.signature(study_class).parameters:
            options.setdefault("experiment", self.experiment)
        return study_class(profile, **options)

    @property
    def takes_seed(self) -> bool:
        """Whether the study trains at a seed given to it (the notebooks the report runs once per seed)."""
        return "seed" in inspect.signature(_lookup(self.study_class)).parameters

    @property
    def training(self) -> Callable[[object], dict[str, Step]]:
        return _lookup(self.training_steps)

    @property
    def evaluation(self) -> Callable[[object], dict[str, Step]] | None:
        return _lookup(self.evaluation_steps) if self.evaluation_steps else None


def _lookup(where: str):
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


# -- notebooks 03 and 04 ------------------------------------------------------------------------------------------


def bert_training_steps(study) -> dict[str, Step]:
    """Notebook 03's and 04's trainings on a pretrained encoder, in the order the notebooks ask for them."""
    p = study.profile
    steps = {"dense": Step("the dense fine-tune (the warm start of every gated model)", (("dense", study.dense),)),
             "budgeted": Step("the warm-start budgeted gates and their hard adaptation",
                              (("warm-start budgeted", study.warm_start_budgeted),
                               ("hard-adapted", study.hard_adapted)))}
    if p.static_budgets:
        steps["static"] = Step("a static specialist per budget and its hard adaptation",
                               tuple(run for b in p.static_budgets
                                     for run in ((f"static @{b:g}", lambda b=b: study.warm_start_static(b)),
                                                 (f"static @{b:g}, hard-adapted",
                                                  lambda b=b: study.static_hard_adapted(b)))))
    if p.posthoc_budgets:
        importance = {}  # the dense heads' importance (validation loss per masked head): scored once, cuts each

        def recovered(budget):
            def run():
                dense = study.dense()[0]
                if "dense" not in importance:
                    importance["dense"] = study.head_importance(dense)
                return study.recovered(dense, importance["dense"], budget)
            return run

        steps["posthoc"] = Step("the dense model pruned post hoc and recovered for an epoch, per budget",
                                tuple((f"post-hoc recovery @{b:g}", recovered(b)) for b in p.posthoc_budgets))
    if study.experiment == "bert_dbpedia14":  # notebook 04 sets its gate ranking beside AG News's (notebook 03's)
        def ag_news_budgeted():
            from bab.experiments.bert import BertStudy
            from bab.experiments.profiles import get_profile

            ag_news = BertStudy(get_profile("bert_ag_news", p.name), experiment="bert_ag_news", cache=study.cache,
                                progress=study.progress, seed=p.seed)
            return ag_news.warm_start_budgeted()

        steps["ag-news"] = Step("notebook 03's warm-start budgeted AG News checkpoint at the same seed (its dense "
                                "fine-tune first)", (("AG News warm-start budgeted", ag_news_budgeted),))
    return steps


# -- notebook 05 -------------------------------------------------------------------------------------------------


def vit_training_steps(study) -> dict[str, Step]:
    """Notebook 05's trainings, in the order it asks for them (its dense teacher first in every step)."""
    from bab.experiments.vit import PREDICTOR_PRESETS, ViT197Study, token_count_control

    p = study.profile

    def preset(name):
        s = study.preset_study(name)
        return ((f"preset {name}, phase 1", s.predictor), (f"preset {name}, phase 2", s.sparsifiner))

    steps = {"dense": Step("the dense ViT teacher", (("dense", study.dense),))}
    for name in PREDICTOR_PRESETS:
        steps[f"preset-{name}"] = Step(f"phase 1 and phase 2 of the predictor preset {name!r}", preset(name))
    steps["presets"] = Step("phase 1 and phase 2 of every predictor preset the notebook chooses among",
                            tuple(run for name in PREDICTOR_PRESETS for run in preset(name)))
    steps["evit"] = Step("EViT and Sparsif-EViT fine-tuned at each token keep rate",
                         tuple(run for keep in p.token_keep_rates
                               for run in ((f"EViT at token keep {keep:g}", lambda k=keep: study.evit(k)),
                                           (f"Sparsif-EViT at token keep {keep:g}",
                                            lambda k=keep: study.evit_sparsifiner(k)))))
    steps["heads"] = Step("the budgeted head gates and their hard adaptation",
                          (("budgeted heads", study.budgeted_heads),
                           ("budgeted heads, hard", study.budgeted_heads_hard)))
    steps["linformer"] = Step("the Linformer baseline at equal budget", (("linformer", study.linformer),))
    if p.variant_197 is not None:  # without the 197-token variant there is no control for it either
        control = study.with_profile(token_count_control(p))
        variant = ViT197Study(p.variant_197, cache=study.cache, progress=study.progress)
        steps["control"] = Step("the 50-token model under the 197-token recipe (dense, phase 1, phase 2)",
                                (("control, dense", control.dense), ("control, phase 1", control.predictor),
                                 ("control, phase 2", control.sparsifiner)))
        steps["197"] = Step("the 197-token variant (dense, phase 1, phase 2)",
                            (("197 tokens, dense", variant.dense), ("197 tokens, phase 1", variant.predictor),
                             ("197 tokens, phase 2", variant.sparsifiner)))
    return steps


# -- notebook 06 -------------------------------------------------------------------------------------------------


def gpt2_training_steps(study) -> dict[str, Step]:
    """Notebook 06's trainings: the dense GPT-2, a specialist per gamma, the budget-conditioned checkpoint, the
    like-for-like references (the dense model continued, the static masks fine-tuned per gamma) and the
    ablations at the gamma closest to the target fraction pruned (found by evaluating the specialists, which trains
    any that are missing)."""
    from bab.experiments.context_pruning import closest_to

    p = study.profile

    def gamma_near_target() -> float:
        import pandas as pd

        rows = [{"gamma": g, **study.evaluate(study.pruned(g)[0])} for g in p.gammas]
        return float(closest_to(pd.DataFrame(rows), "fraction_pruned", p.target_pruned).gamma)

    def ablation(r=None, irreversible=True):
        return lambda: study.pruned(gamma_near_target(), r=r, irreversible=irreversible)

    steps = {"dense": Step("the dense GPT-2, trained from scratch", (("dense", study.dense),))}
    for gamma in p.gammas:
        steps[f"gamma-{gamma:g}"] = Step(f"the gamma = {gamma:g} specialist",
                                         ((f"gamma={gamma:g}", lambda g=gamma: study.pruned(g)),))
    steps["budgeted"] = Step("the budget-conditioned checkpoint", (("budget-conditioned", study.budget_conditioned),))
    steps["dense-finetune"] = Step("the dense GPT-2 continued for the specialists' steps (the like-for-like dense)",
                                   (("dense fine-tune", study.dense_fine_tuned),))
    _static_fine_tune_steps(study, steps)
    runs = [(f"r={r} at the gamma closest to {p.target_pruned:.0%} pruned", ablation(r=r)) for r in p.r_ablation]
    if p.irreversibility_ablation:
        runs.append((f"reversible at the gamma closest to {p.target_pruned:.0%} pruned", ablation(irreversible=False)))
    if runs:
        steps["ablations"] = Step("the interaction-width and irreversibility ablations", tuple(runs))
    return steps


def _static_fine_tune_steps(study, steps: dict) -> None:
    """Per gamma, the static masks matched to its specialist's fraction pruned, fine-tuned under the mask with its
    recipe (evaluating the specialist, trained first if missing); none where the specialists train their
    interactions alone, which leaves a masked decoder nothing to train."""
    from bab.context.static_masks import KINDS as STATIC_KINDS

    if study.profile.finetune.freeze_pretrained:
        return
    for gamma in study.profile.gammas:
        steps[f"gamma-{gamma:g}-static"] = Step(
            "the static masks matched to its fraction pruned, fine-tuned under the mask with its recipe",
            tuple((f"gamma={gamma:g}, {kind} mask fine-tuned",
                   lambda g=gamma, k=kind: study.static_fine_tuned_for(g, k)) for kind in STATIC_KINDS))


# -- notebook 07 -------------------------------------------------------------------------------------------------


def decoder_training_steps(study) -> dict[str, Step]:
    """Notebook 07's fine-tunes: the dense one (the like-for-like reference, where the specialists fine-tune the
    decoder's weights), the budget-conditioned one, and per gamma of the profile the specialist, its frozen twin
    (where the profile has one) and the static masks fine-tuned at its sparsity."""
    p = study.profile
    steps = {}
    if not p.finetune.freeze_pretrained:
        steps["dense"] = Step("the dense fine-tune (same protocol, no pruning)", (("dense fine-tune",
                                                                                  study.dense_fine_tuned),))
    steps["budgeted"] = Step("the budget-conditioned fine-tune", (("budget-conditioned", study.budget_conditioned),))
    for gamma in p.gammas:
        steps[f"gamma-{gamma:g}"] = Step(f"the gamma = {gamma:g} specialist",
                                         ((f"gamma={gamma:g}", lambda g=gamma: study.pruned(g)),))
        if p.frozen_finetune is not None:
            steps[f"gamma-{gamma:g}-frozen"] = Step(
                "its frozen twin (pretrained weights fixed)",
                ((f"gamma={gamma:g} (frozen)", lambda g=gamma: study.pruned(g, frozen=True)),))
    _static_fine_tune_steps(study, steps)
    return steps


def decoder_evaluation_steps(study) -> dict[str, Step]:
    """Notebook 07's evaluations of one decoder each (held-out perplexity on each text and the zero-shot tasks; a
    specialist's static baselines at its sparsity; the budget table of the budget-conditioned one). Each run
    returns the lines to print. Never trains: a model not in the run cache is an error saying so."""
    def evaluated(load, prune: bool, static: bool = False):
        def run():
            model, _ = load()
            result = study.evaluations(model, prune=prune)
            lines = [f"{text}: perplexity {r['perplexity']:.3f}, fraction pruned {r['fraction_pruned']:.3f}"
                     for text, r in result["texts"].items()]
            if static:  # the notebook matches the static baselines to these fractions
                fractions = {text: r["fraction_pruned"] for text, r in result["texts"].items()}
                table = study.static_baselines(study.dense()[0], fractions)
                lines.append(table[["text", "method", "fraction_pruned", "perplexity"]].round(3).to_string(index=False))
            lines += [f"{task}: accuracy {r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}], n {r['n']}"
                      for task, r in result["zero_shot"].items()]
            return "\n".join(lines)
        return run

    def budget_table():
        model, _ = study.budget_conditioned()
        return study.budget_table(model, study.profile.budgets).round(3).to_string(index=False)

    p = study.profile
    steps = {"pretrained": Step("the pretrained decoder itself", (("pretrained", evaluated(study.dense, False)),))}
    if not p.finetune.freeze_pretrained:
        steps["dense"] = Step("the dense fine-tune", (("dense fine-tune", evaluated(study.dense_fine_tuned, False)),))
    steps["budgeted"] = Step("the budget-conditioned fine-tune's budget table", (("budget-conditioned",
                                                                                 budget_table),))
    for gamma in p.gammas:
        steps[f"gamma-{gamma:g}"] = Step(
            f"the gamma = {gamma:g} specialist, with the static baselines at its sparsity",
            ((f"gamma={gamma:g}", evaluated(lambda g=gamma: study.pruned(g), True, static=True)),))
        if p.frozen_finetune is not None:
            steps[f"gamma-{gamma:g}-frozen"] = Step(
                "its frozen twin", ((f"gamma={gamma:g} (frozen)",
                                     evaluated(lambda g=gamma: study.pruned(g, frozen=True), True)),))
    return steps


# notebook number -> its steps, for the notebooks of the registry that have any
NOTEBOOKS = {notebook.number: NotebookSteps(notebook.experiment, f"{notebook.module}:{notebook.study}",
                                            notebook.training_steps, notebook.evaluation_steps)
             for notebook in registry.NOTEBOOKS if notebook.training_steps}


def chosen_steps(steps: dict[str, Step], names, profile_name: str) -> list[Step]:
    """The steps ``names`` of ``steps``, in the order given; a ValueError naming the ones the profile has."""
    unknown = [name for name in names if name not in steps]
    if unknown:
        raise ValueError(f"profile {profile_name!r} has no step {unknown[0]!r}; choose among {', '.join(steps)}")
    return [steps[name] for name in names]
