"""Notebook 06's steps: a small GPT-2 on LM text, context-pruning fine-tunes, evaluation, throughput.

Every trained model goes through the run cache (``bab.experiments.study.Study``), keyed by its whole lineage
(data, model shape, training config, and for fine-tunes the dense run it started from).

- ``dense()``: offline, a GPT-2-shaped model trained from scratch on ``$BAB_DATA_DIR/lm`` with a
  BPE tokenizer fitted on the training split; ``base="gpt2"`` (online) loads pretrained GPT-2 and
  its tokenizer instead.
- ``pruned(gamma, r, irreversible)``: the dense weights plus fresh interaction modules, fine-tuned
  with CE + gamma * keep mass, alpha 1 -> 8 (the paper's recipe).
- ``budget_conditioned()``: one fine-tune whose interaction bias takes the requested keep budget.
- ``evaluate(model)``: validation perplexity and fraction of context pruned (hard decisions);
  ``static_baselines(...)``: the paper's local-window and strided masks at the same fraction pruned
  (bab.experiments.decoder_study, shared with notebook 07).
- ``throughput(...)``: generation tokens/s and KV-cache memory against dense (bab.context.bench).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache, as_downloaded
from bab.data.lm import LMData, LMDataConfig, load_lm_data
from bab.experiments.decoder_study import (  # noqa: F401 (closest_to, interpolate_specialists re-exported)
    DecoderStudy,
    closest_to,
    context_pruning_methods,
    interpolate_specialists,
)

# ----------------------------------------------------------------------------- profiles

# the keep budgets the budget-conditioned checkpoint is asked for; each should be delivered within +/- 0.05
BUDGETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)


@dataclass(frozen=True)
class ContextPruningProfile:
    """Dynamic Context Pruning (arXiv 2305.15805; docs/context-pruning.md) at CPU scale: notebook 06."""

    name: str
    data: LMDataConfig
    model: dict  # transformers GPT2Config fields other than vocab_size
    dense: LMTrainConfig  # pretraining from scratch (offline); its context is also the evaluation context
    finetune: LMTrainConfig  # objective context_pruning; gamma is set per specialist
    budgeted: LMTrainConfig  # objective budget_context (beyond the paper)
    gammas: tuple[float, ...]
    r: int = 64  # the paper's interaction width
    init_bias: float = 4.0
    target_pruned: float = 0.8  # the paper's headline: ~80% of the context pruned
    budgets: tuple[float, ...] = BUDGETS  # keep budgets of the budget-conditioned checkpoint
    r_ablation: tuple[int, ...] = ()  # paper profile: (32, 64, 128) at the ~80% gamma
    irreversibility_ablation: bool = False  # paper profile: the ~80% gamma without the cumulative product
    eval_windows: int = 64  # validation windows of `dense.context` tokens
    bench_batch: int = 16
    bench_prompts: tuple[int, ...] = (128, 896)  # a short prompt and a long one (>= 512)
    bench_new_tokens: int = 64
    bench_repeats: int = 3
    bench_warmup: int = 1
    view_tokens: int = 48  # length of the passage in the dropped-token view


# A GPT-2-shaped model small enough to pretrain on 2 CPU cores: 4 layers x 4 heads, width 128,
# GPT-2's 1024 positions (so a long prompt fits; positions beyond the training context are never
# trained, see the notebook). No dropout: runs are short and the data is not small for this size.
_GPT2_MODEL = dict(n_positions=1024, n_embd=128, n_layer=4, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                   attn_pdrop=0.0)
# Dense pretraining: lr 3e-3 with warm-up and cosine decay trained fastest of 1e-3 / 3e-3 in a
# 300-step probe. The paper fine-tunes pretrained GPT-2 for a short run; we fine-tune the whole
# model at 1e-3 and the fresh interaction modules at 1e-2 (they start from zero knowledge).
_LM_DENSE = LMTrainConfig(objective="lm", batch_size=16, context=128, lr=3e-3)
_LM_PRUNE = LMTrainConfig(objective="context_pruning", batch_size=16, context=128, lr=1e-3, pruning_lr=1e-2)
# Budget-conditioned: Eq. 5 of the head-gates paper with the keep mass as the cost and no lambda_cost,
# two-sided: with only a keep mass above b penalised, cross-entropy did not pull the keep mass back up to b
# (the quick checkpoint kept <= 26% at every budget up to 0.7), so a keep mass below b is penalised too.
# It gets as many steps as one specialist, so the comparison asks what conditioning costs per checkpoint.
_LM_BUDGET = LMTrainConfig(objective="budget_context", batch_size=16, context=128, lr=1e-3, pruning_lr=1e-2,
                           budget_min=0.05, budget_max=0.8, lambda_cost=0.0, lambda_viol=50.0, two_sided=True)


GPT2_CONTEXT_PRUNING = {
    "smoke": ContextPruningProfile(
        name="smoke",
        data=LMDataConfig(files=("austen.txt",), max_chars=600_000, vocab_size=2048),
        model=_GPT2_MODEL,
        dense=replace(_LM_DENSE, steps=150),
        finetune=replace(_LM_PRUNE, steps=30),
        budgeted=replace(_LM_BUDGET, steps=30),
        gammas=(0.01, 0.1),
        budgets=(0.1, 0.3, 0.6),
        eval_windows=16,
        bench_batch=8,
        bench_prompts=(512,),
        bench_new_tokens=16,
        bench_repeats=2,
    ),
    "quick": ContextPruningProfile(
        name="quick",
        data=LMDataConfig(files=("austen.txt",), vocab_size=4096),
        model=_GPT2_MODEL,
        dense=replace(_LM_DENSE, steps=600),
        finetune=replace(_LM_PRUNE, steps=100),
        budgeted=replace(_LM_BUDGET, steps=100),
        gammas=(0.003, 0.03, 0.1, 0.3),
    ),
    "paper": ContextPruningProfile(
        name="paper",
        data=LMDataConfig(files=("austen.txt",), vocab_size=4096),
        model=_GPT2_MODEL,
        dense=replace(_LM_DENSE, steps=4000),
        finetune=replace(_LM_PRUNE, steps=400),
        budgeted=replace(_LM_BUDGET, steps=400),
        gammas=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3),
        r_ablation=(32, 64, 128),
        irreversibility_ablation=True,
        eval_windows=256,
        bench_repeats=5,
        bench_prompts=(128, 512, 896),
    ),
}


# ----------------------------------------------------------------------------- the study


EXPERIMENT = "gpt2_context_pruning"
GPT2_METHODS = context_pruning_methods(EXPERIMENT)
METHOD_SETS = (GPT2_METHODS,)


class ContextPruningStudy(DecoderStudy):
    experiment = EXPERIMENT

    def __init__(self, profile, cache: RunCache | None = None, progress: bool = True, base: str = "scratch"):
        if base not in ("scratch", "gpt2"):
            raise ValueError(f"base must be 'scratch' (train a small GPT-2 offline) or 'gpt2' (pretrained, online), "
                             f"got {base!r}")
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
