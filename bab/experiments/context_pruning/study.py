"""Notebook 06's study: ``ContextPruningStudy`` (a small GPT-2 trained here, or pretrained GPT-2 online, its
context-pruning fine-tunes through the run cache) and the rows it declares; the measurements are ``DecoderStudy``'s."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache, as_downloaded
from bab.data.lm import LMData, LMDataConfig, load_lm_data
from bab.experiments.pipelines.decoder import DecoderStudy
from bab.experiments.pipelines.decoder_methods import context_pruning_methods

EXPERIMENT = "gpt2_context_pruning"
GPT2_METHODS = context_pruning_methods(EXPERIMENT)
METHOD_SETS = (GPT2_METHODS,)


class ContextPruningStudy(DecoderStudy):
    experiment = EXPERIMENT

    def __init__(self, profile, cache: RunCache | None = None, progress: bool = True, base: str = "scratch",
                 seed: int | None = None):
        """``seed``: every training's seed (the dense pretraining's and the fine-tunes' batch order and draws);
        None keeps the profile's training configs as they are."""
        if base not in ("scratch", "gpt2"):
            raise ValueError(f"base must be 'scratch' (train a small GPT-2 offline) or 'gpt2' (pretrained, online), "
                             f"got {base!r}")
        if seed is not None:
            profile = replace(profile, **{phase: replace(getattr(profile, phase), seed=seed)
                                          for phase in ("dense", "finetune", "budgeted")})
        super().__init__(profile, cache, progress)
        self.base = base
        self._data = None
        self._dense = None

    # ------------------------------------------------------------------ data and shapes

    @property
    def data_config(self) -> LMDataConfig:
        config = self.profile.data
        return replace(config, tokenizer="gpt2") if self.base == "gpt2" else config

    def build(self) -> LMData:
        if self._data is None:
            self._data = load_lm_data(self.data_config)
        return self._data

    def model_config(self, pruning: PruningConfig | None = None) -> dict:
        """What determines the decoder a run builds: transformers' GPT-2 of the profile's shape, and its pruning."""
        return {"family": "gpt2", "vocab_size": self.build().tokenizer.vocab_size, **self.profile.model,
                "pruning": pruning}

    def new_model(self, pruning: PruningConfig | None = None) -> GPT2LMHeadModel:
        """A freshly initialised transformers GPT-2 of the profile's shape, with ``pruning`` attached if given."""
        # no pad token: windows of running text hold the paragraph separator (end-of-text), never padding
        eot = self.build().tokenizer.eot_id
        config = GPT2Config(vocab_size=self.build().tokenizer.vocab_size, **self.profile.model, bos_token_id=eot,
                            eos_token_id=eot, pad_token_id=None)
        model = GPT2LMHeadModel(config)
        return attach(model, pruning) if pruning is not None else model

    def pruning_config(self, r: int | None = None, irreversible: bool = True,
                       budget_conditioned: bool = False) -> PruningConfig:
        return PruningConfig(r=r or self.profile.r, irreversible=irreversible, init_bias=self.profile.init_bias,
                             budget_conditioned=budget_conditioned)

    def data_lineage(self) -> dict:
        return self.data_config

    # ------------------------------------------------------------------ training through the cache

    def dense(self) -> tuple[GPT2LMHeadModel, dict]:
        """The dense model: pretrained GPT-2 (base='gpt2') or trained from scratch here, through the cache."""
        return self._dense_run()[:2]

    def _dense_run(self):
        """(dense model, metrics, lineage), built or loaded once per study."""
        if self._dense is not None:
            return self._dense
        if self.base == "gpt2":
            model = GPT2LMHeadModel.from_pretrained("gpt2").eval()
            metrics = {"history": [], "train_seconds": 0.0, "cached": True, "source": "pretrained gpt2"}
            lineage = {"experiment": self.experiment, "base": "gpt2", "model": "gpt2"}
            as_downloaded(model)
            self._dense = (model, metrics, lineage)
            return self._dense
        self._dense = self.fine_tune("dense", self.new_model, self.model_config(), self.profile.dense, base=self.base)
        return self._dense

    def _fine_tune(self, run_name: str, pruning: PruningConfig, train_config: LMTrainConfig):
        """The dense weights plus fresh interaction modules of ``pruning``, fine-tuned under ``train_config``."""
        dense, _, dense_lineage = self._dense_run()
        if self.base == "gpt2":
            def build():
                return attach(GPT2LMHeadModel(copy.deepcopy(dense.config)), pruning)  # attaching changes the config
        else:
            def build():
                return self.new_model(pruning)
        model, metrics, _ = self.fine_tune(run_name, build, self.model_config(pruning), train_config,
                                           parent=dense_lineage, init=dense, new_modules=("interaction",),
                                           base=self.base)
        return model, metrics

    def _plain_fine_tune(self, run_name: str, static_mask: tuple[str, int] | None = None):
        """The dense weights, nothing attached, fine-tuned like a specialist without its pruning
        (``plain_fine_tune_config``), under ``static_mask`` (kind, window or stride) if given."""
        dense, _, dense_lineage = self._dense_run()
        if self.base == "gpt2":
            def build():
                return GPT2LMHeadModel(copy.deepcopy(dense.config))
        else:
            def build():
                return self.new_model()
        model, metrics, _ = self.fine_tune(run_name, build, self.model_config(), self.plain_fine_tune_config(),
                                           parent=dense_lineage, init=dense, base=self.base, static_mask=static_mask)
        return model, metrics

    def dense_fine_tuned(self):
        """The like-for-like dense reference of the specialists: the dense model continued for their steps with their
        recipe and the plain next-token loss. A specialist also trains its weights for those steps, so the gain of
        the extra training would otherwise read as a gain from pruning."""
        return self._plain_fine_tune("dense-finetune")

    def static_fine_tuned(self, kind: str, size: int):
        """The dense model fine-tuned under the ``kind`` pattern of window or stride ``size``, with the specialists'
        data, steps and recipe (``plain_fine_tune_config``)."""
        return self._plain_fine_tune(f"static-{kind}-{size}", static_mask=(kind, size))

    def pruned(self, gamma: float, r: int | None = None, irreversible: bool = True):
        """A per-gamma specialist: dense weights + interactions, fine-tuned with CE + gamma * keep mass."""
        train_config = replace(self.profile.finetune, gamma=float(gamma))
        name = f"prune-g{gamma:g}-r{r or self.profile.r}" + ("" if irreversible else "-reversible")
        return self._fine_tune(name, self.pruning_config(r, irreversible), train_config)

    def budget_conditioned(self):
        """One checkpoint for several keep budgets (beyond the paper)."""
        return self._fine_tune("prune-budget", self.pruning_config(budget_conditioned=True), self.profile.budgeted)

    # ------------------------------------------------------------------ measurements (see DecoderStudy)

    @property
    def eval_context(self) -> int:
        return self.profile.dense.context

    def eval_ids(self, text: str = "val") -> torch.Tensor:
        if text != "val":
            raise ValueError(f"notebook 06 evaluates on its validation split only (text='val'), got {text!r}")
        return self.build().val_ids
