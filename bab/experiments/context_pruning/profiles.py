"""Notebook 06's profiles: ``ContextPruningProfile`` and its smoke / quick / record / paper sizes
(``GPT2_CONTEXT_PRUNING``), each value's reason beside it, and the keep budgets of the budget-conditioned checkpoint
(``BUDGETS``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.context.train import LMTrainConfig
from bab.core.timing import Repeats
from bab.data.lm import LMDataConfig

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
    bench_repeats: int | Repeats = 3  # a count, or Repeats: until the throughput ratios' intervals are tight
    bench_warmup: int = 1
    view_tokens: int = 48  # length of the passage in the dropped-token view
    # the seeds the report runs the notebook at (bab.report.results.seeds; () : once, at the training configs' own
    # seed): each seed pretrains its own dense model and fine-tunes its own specialists from it
    report_seeds: tuple[int, ...] = ()
    # what this profile trains or measures less than the paper's protocol (or, where the paper fine-tunes pretrained
    # GPT-2, than the paper profile), each named once: the record's claims say so in their setup column
    reductions: tuple[str, ...] = ()


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
        bench_repeats=Repeats(2, target=0.05, maximum=6),
    ),
    # The record (each seed's run at most an hour on one core, docs/record.md). On one loaded core a step takes
    # ~0.29 s dense, ~0.46 s a specialist, ~0.36 s a static mask fine-tuned (two a gamma): the paper profile's
    # 4,000 + 6 x 400 steps, its 12 static fine-tunes and 4 ablations would take ~1.4 h of a seed's run.
    "record": ContextPruningProfile(
        name="record",
        data=LMDataConfig(files=("austen.txt",), vocab_size=4096),
        model=_GPT2_MODEL,
        dense=replace(_LM_DENSE, steps=2000),
        finetune=replace(_LM_PRUNE, steps=200),
        budgeted=replace(_LM_BUDGET, steps=200),
        # the paper profile's gammas but its smallest (0.001), which prunes least: the claims' ~80% lies at the top
        gammas=(0.003, 0.01, 0.03, 0.1, 0.3),
        eval_windows=256,
        bench_repeats=Repeats(2, target=0.05, maximum=6),
        report_seeds=(7, 13, 21),
        reductions=("pretraining 2,000 of the paper profile's 4,000 steps (the paper fine-tunes pretrained GPT-2)",
                    "fine-tunes of 200 of the paper profile's 400 steps", "5 of the paper profile's 6 gammas",
                    "no interaction-width or irreversibility ablation", "throughput at prompts of 128 and 896 tokens, "
                    "to +-5% in at most 6 repeats (the paper profile: also 512, +-3%, 15)"),
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
        bench_repeats=Repeats(3, target=0.03, maximum=15),
        bench_prompts=(128, 512, 896),
        report_seeds=(7, 13, 21),  # the budgeted-attention paper's seeds, so a verdict can tell method from seed
    ),
}
