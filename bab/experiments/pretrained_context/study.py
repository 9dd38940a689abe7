"""Notebook 07's study: ``PretrainedContextStudy``, the decoder, the texts, the fine-tunes and measurements."""

from __future__ import annotations

import copy
from dataclasses import asdict, replace

import pandas as pd
import torch
from torch import nn

from bab.context import zero_shot
from bab.context.attach import attach, interactions
from bab.context.eviction import EvictionPolicy
from bab.context.interaction import PruningConfig
from bab.context.lm import lm_forward
from bab.context.pretrained import load_hf_decoder
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache, as_downloaded, config_difference, tag_as
from bab.core.warm_start import warm_start
from bab.data.lm import LMData, LMDataConfig, LMTokenizer, load_lm_data
from bab.data.text.datasets import load_text_dataset
from bab.experiments.pipelines.decoder import DecoderStudy
from bab.experiments.pretrained_context.profiles import (
    EXPERIMENT,
    PretrainedContextProfile,
)

TOPIC_WORDS = {"World": "world news", "Sports": "sports", "Business": "business", "Sci/Tech": "science and technology"}
ZERO_SHOT_TASKS = ("cloze", "ending", "topic")


class _Interactions(nn.Module):
    """The interaction modules of a decoder, as one module: what the cache stores for a frozen fine-tune."""

    def __init__(self, model):
        super().__init__()
        self.layers = nn.ModuleList(interactions(model))


class PretrainedContextStudy(DecoderStudy):
    experiment = EXPERIMENT

    def __init__(self, profile: PretrainedContextProfile, cache: RunCache | None = None, progress: bool = True,
                 seed: int | None = None):
        """``seed``: every fine-tune's seed (the fresh interactions, the batch order and the draws; the dense and static
        fine-tunes take the specialists'); the held-out text and the zero-shot items stay the profile's, so runs at
        several seeds score the same items. None keeps the profile's training configs as they are."""
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"seed must be a whole number (e.g. 7, 13 or 21) or None for the profile's, "
                                 f"got {seed!r}")
            profile = replace(profile, **{phase: replace(getattr(profile, phase), seed=seed)
                                          for phase in ("finetune", "frozen_finetune", "budgeted")
                                          if getattr(profile, phase) is not None})
        super().__init__(profile, cache, progress)
        self._base = None  # (the pretrained decoder, LMTokenizer, source)
        self._data = None
        self._ood = None
        self._zero_shot = None

    # ------------------------------------------------------------------ the decoder and the texts

    def _load(self):
        if self._base is None:
            hf_model, hf_tokenizer, source = load_hf_decoder(self.profile.source)
            tokenizer = LMTokenizer.from_hf(hf_tokenizer, source.describe())
            self._base = (as_downloaded(hf_model.eval()), tokenizer, source)
        return self._base

    def downloaded_identity(self) -> str:
        return self._load()[2].describe()

    def dense(self):
        """(the pretrained decoder, nothing attached, {"source": ...})."""
        model, _, source = self._load()
        return model, {"source": source.describe(), "cached": True}

    @property
    def tokenizer(self) -> LMTokenizer:
        return self._load()[1]

    def build(self) -> LMData:
        """Austen tokenized with the decoder's tokenizer: training split and held-out blocks."""
        if self._data is None:
            self._data = load_lm_data(self.profile.data, tokenizer=self.tokenizer)
        return self._data

    def ood(self) -> LMData:
        """The out-of-domain text (its held-out blocks are what we evaluate on)."""
        if self._ood is None:
            self._ood = load_lm_data(replace(self.profile.data, files=(self.profile.ood_file,)),
                                     tokenizer=self.tokenizer)
        return self._ood

    @property
    def texts(self) -> tuple[str, ...]:
        return ("austen", "wiki")

    @property
    def eval_context(self) -> int:
        return self.profile.eval_context

    def eval_ids(self, text: str) -> torch.Tensor:
        if text == "austen":
            return self.build().val_ids
        if text == "wiki":
            return self.ood().val_ids
        raise ValueError(f"text must be one of {self.texts}, got {text!r}")

    # ------------------------------------------------------------------ zero-shot tasks

    def zero_shot_items(self) -> dict[str, list]:
        """The items of the three tasks (bab.context.zero_shot), built once: the cloze and the ending choice from
        the held-out paragraphs of Austen and wiki (``zero_shot.items`` each), the topic choice from AG News test
        articles (twice as many)."""
        if self._zero_shot is None:
            config = self.profile.zero_shot
            paragraphs = {"austen": self.build().val_lines, "wiki": self.ood().val_lines}
            news = load_text_dataset("ag_news", allow_hub=False)
            topics = [TOPIC_WORDS.get(name, name.lower()) for name in news.class_names]
            self._zero_shot = {
                "cloze": [it for lines in paragraphs.values() for it in zero_shot.cloze_items(lines, config)],
                "ending": [it for lines in paragraphs.values() for it in zero_shot.ending_items(lines, config)],
                "topic": zero_shot.topic_items(news.test.texts, news.test.labels, topics,
                                               replace(config, items=2 * config.items)),
            }
        return self._zero_shot

    def zero_shot(self, model, budget: float | None = None, prune: bool = True,
                  policy: EvictionPolicy | None = None) -> dict[str, dict]:
        """Each task's accuracy, n and 95% interval (and the cloze target's perplexity) on ``model``; with an eviction
        ``policy``, on the plain ``model`` whose cache the policy compresses after each item's context."""
        config = self.profile.zero_shot

        def measure():
            items, tokenizer = self.zero_shot_items(), self.tokenizer
            return {
                "cloze": zero_shot.score_cloze(model, tokenizer, items["cloze"], config.batch_size, budget, prune,
                                               policy=policy),
                "ending": zero_shot.score_choice(model, tokenizer, items["ending"], budget, prune, policy=policy),
                "topic": zero_shot.score_choice(model, tokenizer, items["topic"], budget, prune, score="sum",
                                                policy=policy),
            }

        settings = {"tasks": asdict(config), "budget": budget, "prune": prune}
        if policy is not None:
            settings["policy"] = policy.describe()
        return self.measured("zero-shot", model, settings, measure)

    def eviction_zero_shot(self, policies: dict[str, EvictionPolicy]) -> pd.DataFrame:
        """The zero-shot tasks on the pretrained decoder under each training-free eviction policy: one row per
        (policy, task) with accuracy, its 95% interval and n (fractions), and each item's outcome."""
        dense, _ = self.dense()
        return pd.DataFrame([{"policy": name, "task": task, **r}
                             for name, policy in policies.items()
                             for task, r in self.zero_shot(dense, policy=policy).items()])

    def evaluations(self, model, prune: bool = True) -> dict:
        """What notebook 07 measures of each decoder it compares, each through the run cache (``measured``):
        ``{"texts": {text: evaluate(...)}, "zero_shot": zero_shot(...)}``. ``python -m bab evaluate 07``
        runs it ahead of the notebook, one model at a time, as the models finish training."""
        return {"texts": {text: self.evaluate(model, prune=prune, text=text) for text in self.texts},
                "zero_shot": self.zero_shot(model, prune=prune)}

    @torch.no_grad()
    def logit_equality(self, tokens: int | None = None) -> dict:
        """The decoder with fresh interactions attached and pruning off (its attention then runs through the
        "bab_context" implementation) against the plain decoder (transformers' SDPA), on a held-out Austen passage:
        max |difference| of the logits."""
        model, _, source = self._load()
        attached = attach(self.fresh_copy(model), self.pruning_config()).eval()
        ids = self.passage(tokens or self.profile.equality_tokens)
        ours = lm_forward(attached, ids, prune=False).logits
        theirs = model(ids).logits
        return {"tokens": ids.shape[1], "max_abs_diff": (ours - theirs).abs().max().item(),
                "logit_scale": theirs.abs().max().item(),
                "same_argmax": bool((ours.argmax(-1) == theirs.argmax(-1)).all()), "source": source.describe()}

    @staticmethod
    def fresh_copy(model):
        """A new decoder of ``model``'s class and config (its own config object: attaching changes the config),
        with ``model``'s weights."""
        twin = type(model)(copy.deepcopy(model.config))
        twin.load_state_dict(model.state_dict())
        return twin

    # ------------------------------------------------------------------ fine-tunes through the cache

    def pruning_config(self, budget_conditioned: bool = False, interaction_init: str | None = None) -> PruningConfig:
        """The interactions' config: the profile's initial values, or ``interaction_init`` ("ours" / "official")."""
        P = self.profile
        init = interaction_init or P.interaction_init
        if init not in ("ours", "official"):
            raise ValueError(f"interaction_init must be 'ours' or 'official', got {init!r}")
        if init == "official":
            return PruningConfig.official(r=P.r, budget_conditioned=budget_conditioned)
        return PruningConfig(r=P.r, init_bias=P.init_bias, budget_conditioned=budget_conditioned)

    def data_lineage(self) -> LMDataConfig:
        return self.profile.data

    def measurement_data(self) -> dict:
        # evaluations also read the out-of-domain text, and the topic choice AG News's test split
        return {**config_difference(self.data_lineage()), "ood_file": self.profile.ood_file,
                "topic_items": "ag_news test"}

    def _fine_tune(self, run_name: str, pruning: PruningConfig | None, train_config: LMTrainConfig,
                   static_mask: tuple[str, int] | None = None):
        """The pretrained weights plus fresh interaction modules of ``pruning``, fine-tuned under ``train_config``
        (and ``static_mask``, (kind, window or stride), if given). With ``freeze_pretrained`` only the interaction
        modules are cached; the pretrained weights are copied in on every call."""
        dense, info = self.dense()
        config = {"family": dense.config.model_type, "pruning": pruning}
        built = {}

        def build():
            # seeded by train_cached: the fresh interactions are reproducible
            model = type(dense)(copy.deepcopy(dense.config))
            if pruning is not None:
                attach(model, pruning)
            warm_start(model, dense, new_modules=("interaction",))
            built["model"] = model
            return _Interactions(model) if train_config.freeze_pretrained else model

        cached, metrics, _ = self.fine_tune(run_name, build, config, train_config, trains=lambda: built["model"],
                                            static_mask=static_mask, decoder=info["source"])
        # with frozen weights the run cache holds the interactions alone: result rows name their run
        return tag_as(built["model"], cached).eval(), metrics

    def dense_fine_tuned(self):
        """The like-for-like dense reference where the profile fine-tunes the whole decoder: the same steps on the
        same text with the plain next-token loss and no interactions. Without it, a pruned fine-tune's gain from
        adapting to the text (Austen) would read as a gain from pruning."""
        if self.profile.finetune.freeze_pretrained:
            raise ValueError(f"profile {self.profile.name!r} freezes the pretrained weights: its dense reference is "
                             "the pretrained decoder itself (dense()), there is nothing to fine-tune")
        return self._fine_tune("dense-finetune", None, self.plain_fine_tune_config())

    def static_fine_tuned(self, kind: str, size: int):
        """The pretrained decoder fine-tuned under the ``kind`` pattern of window or stride ``size``, with the
        specialists' data, steps and recipe (``plain_fine_tune_config``). Where the profile's specialists train only
        their interactions (``freeze_pretrained``), the same protocol leaves a static mask nothing to train: the
        pretrained decoder as loaded, with ``"fine_tuned": False``."""
        if self.profile.finetune.freeze_pretrained:
            dense, info = self.dense()
            return dense, {**info, "fine_tuned": False}
        return self._fine_tune(f"static-{kind}-{size}", None, self.plain_fine_tune_config(), static_mask=(kind, size))

    def pruned(self, gamma: float, frozen: bool = False, interaction_init: str | None = None):
        """A per-gamma specialist: pretrained weights + interactions fine-tuned with CE + gamma * keep mass.
        ``frozen``: the profile's frozen twin of the same protocol (``frozen_finetune``), only the interactions
        trained. ``interaction_init``: other initial values than the profile's (the ablation of "ours" against
        "official")."""
        if frozen and self.profile.frozen_finetune is None:
            raise ValueError(f"profile {self.profile.name!r} has no frozen twin: its fine-tunes "
                             f"{'are frozen already' if self.profile.finetune.freeze_pretrained else 'have no twin'}; "
                             "call pruned(gamma) without frozen=True")
        base = self.profile.frozen_finetune if frozen else self.profile.finetune
        train_config = replace(base, gamma=float(gamma))
        suffix = "-frozen" if frozen else ""
        if interaction_init not in (None, self.profile.interaction_init):
            suffix += f"-{interaction_init}-init"
        return self._fine_tune(f"prune-g{gamma:g}-r{self.profile.r}{suffix}",
                               self.pruning_config(interaction_init=interaction_init), train_config)

    def budget_conditioned(self):
        """One checkpoint for several keep budgets (beyond the paper)."""
        return self._fine_tune("prune-budget", self.pruning_config(budget_conditioned=True), self.profile.budgeted)

    # -- result rows: what notebook 07 measured, as the report's rows ---------------------------------

    def frozen_rows(self, evaluations: list[dict], twins: dict) -> list[dict]:
        """The frozen twins (pretrained weights frozen, only the interaction trained), one row per gamma
        (``evaluations``: each an ``evaluate`` with its "gamma"; ``twins``: {gamma: model})."""
        return [self.result_row(self.methods.frozen, None, e, settings={"gamma": e["gamma"]}, models=twins[e["gamma"]])
                for e in evaluations]

    def zero_shot_rows(self, table: pd.DataFrame, models: dict) -> list[dict]:
        """One row per (task, weights, gamma) of notebook 07's zero-shot table (accuracy and its Wilson interval in
        %, each item's outcome and fingerprint); ``models``: {(weights, gamma): the model scored}."""
        return [self.result_row(self.methods.zero_shot, None, r, settings={"task": r["task"], "weights": r["weights"],
                                                                          "gamma": r["gamma"]},
                                accuracy_low=r["ci_low"], accuracy_high=r["ci_high"], accuracy_n=r["n"],
                                models=models[r["weights"], r["gamma"]])
                for r in table.to_dict("records")]

    def eviction_zero_shot_rows(self, table: pd.DataFrame, fraction_kept: float) -> list[dict]:
        """One row per (task, policy) of ``eviction_zero_shot`` (accuracy and its Wilson interval in %, each item's
        outcome and fingerprint), on the pretrained decoder."""
        dense, _ = self.dense()
        return [self.result_row(self.methods.eviction_zero_shot, fraction_kept, {**r, "accuracy": 100 * r["accuracy"]},
                                settings={"task": r["task"], "policy": r["policy"]}, accuracy_low=100 * r["ci_low"],
                                accuracy_high=100 * r["ci_high"], accuracy_n=r["n"], models=dense)
                for r in table.to_dict("records")]

    def zero_shot_budgeted_rows(self, scores: dict, budget: float, model) -> list[dict]:
        """The budget-conditioned model's zero-shot scores at ``budget`` ({task: ``zero_shot`` result with its
        "fraction_pruned"}; accuracy as a fraction, turned to %)."""
        return [self.result_row(self.methods.zero_shot_budgeted, budget, {**r, "accuracy": 100 * r["accuracy"]},
                                settings={"task": task}, accuracy_low=100 * r["ci_low"],
                                accuracy_high=100 * r["ci_high"], models=model)
                for task, r in scores.items()]
