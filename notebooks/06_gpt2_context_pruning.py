# %% [markdown]
# # 06 · GPT-2 with dynamic context pruning: perplexity vs sparsity, a KV cache that forgets, measured throughput
#
# *Dynamic Context Pruning for Efficient and Interpretable Autoregressive Transformers* (Anagnostidis et al.,
# arXiv 2305.15805) lets a GPT-2 decide, while it reads, which earlier tokens it will never need again.
# Each layer $\ell$ gets a small interaction query/key pair of width $r$ (64 in the paper), shared by its heads.
# For a token $n$ and an earlier token $j$:
#
# $$s_{nj} = \frac{Q^{int}_n \cdot K^{int}_j}{\sqrt r} + \beta, \qquad p_{nj} = \alpha\text{-sigmoid}(s_{nj}) = \alpha\text{-entmax}([s_{nj}, 0])_1,
# \qquad I_{kj} = \prod_{n=j+1}^{k} p_{nj}.$$
#
# $\log I$ is added to the causal attention logits. The cumulative product makes dropping **irreversible**
# (once some token drops $j$, nobody later sees it), a token never drops itself, and $\alpha = 1$ is the
# plain sigmoid while $\alpha\to\infty$ is a step. Fine-tuning minimises
# $\text{CE} + \gamma\cdot\overline{I}$ (the mean keep mass) with $\alpha$ rising from 1 to 8 on a cosine
# schedule; inference uses hard decisions, and the keys and values of dropped tokens are **removed from
# the KV cache** — that is where the memory and throughput gains come from.
#
# This notebook reproduces, at CPU scale:
#
# 1. transformers' own `GPT2LMHeadModel` with the method attached to it (`bab.context.attach`: an interaction
#    module per layer, a registered attention implementation, a cache that forgets), trained here from
#    scratch on Jane Austen's novels because pretrained `gpt2` is not available offline
#    (`base = "gpt2"` fine-tunes the real one when online);
# 2. per-$\gamma$ specialists and the **perplexity vs fraction pruned** Pareto curve;
# 3. generation through `model.generate()` with a batched KV cache that physically drops tokens, checked
#    against the full forward pass, and **throughput / memory** against dense in the same run, at a long context;
# 4. the **dropped-token view** and the **token kinds** that get dropped;
# 5. beyond the paper: a **budget-conditioned** bias $\beta(b) = \beta + \text{softplus}(\rho)\,\text{logit}(b)$,
#    so one checkpoint serves several context budgets, compared with the specialists;
# 6. at profile `paper`: the $r$ ablation (32 / 64 / 128) and irreversibility on/off.

# %% tags=["parameters"]
# Parameters (papermill overrides these; see run_all.sh)
# smoke: CI, ~52 s on 2 threads; quick: the default report, ~8.5 min on 1 thread; paper: ablations, longer training
profile = "smoke"
results_path = None  # where the report wants this notebook's result rows (JSON); None: don't write
interactive = None  # unused here (no widget); the report passes it to every notebook
base = "scratch"  # "scratch": a small GPT-2 trained here (offline) | "gpt2": pretrained GPT-2 from the hub (online)
seed = None  # None: the profile's training seed; the report at paper runs seeds 7, 13 and 21, each its own dense model

# %%
import math
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from bab.context import plots as plots_context
from bab.context.attach import token_drop_times
from bab.context.bench import DYNAMIC, cache_verdicts, speedup_intervals
from bab.core.threads import set_threads
from bab.experiments.context_pruning import ContextPruningStudy, closest_to, interpolate_specialists
from bab.experiments.profiles import get_profile
from bab.report.claims import judgement_table
from bab.report.results.notebook_end import finish_notebook

notebook_start = time.perf_counter()
threads = set_threads()  # $BAB_THREADS (run_all.sh --jobs divides the cores), else every core
print(f"torch threads: {threads} (part of every trained run's cache key: bab.core.threads)")
pd.set_option("display.precision", 3)

P = get_profile("gpt2_context_pruning", profile)
study = ContextPruningStudy(P, progress=False, base=base, seed=seed)
data = study.build()
print(f"profile {P.name}; text from {data.info['source']}")
print(f"{data.info['train_tokens']:,} training / {data.info['val_tokens']:,} validation tokens "
      f"(held out by contiguous blocks of {P.data.block_lines} paragraphs); "
      f"{data.tokenizer.name} tokenizer, {data.tokenizer.vocab_size} tokens, fitted on the training split")
print("a validation passage:", repr(data.tokenizer.decode(data.val_ids[:40].tolist())))

# %% [markdown]
# ## The dense model
#
# transformers' `GPT2LMHeadModel` at a small size, trained from scratch on the training split; perplexity
# is measured on held-out windows of the training context length. The pruned models are copies of it with
# `bab.context.attach.attach(model, PruningConfig(...))`: the same class, fresh interaction modules.

# %%
dense, dense_metrics = study.dense()
dense_eval = study.evaluate(dense, prune=False)
c = dense.config
print(f"GPT-2: {c.n_layer} layers x {c.n_head} heads, width {c.n_embd}, {c.n_positions} positions, "
      f"{sum(p.numel() for p in dense.parameters()) / 1e6:.2f} M parameters; "
      f"trained {P.dense.steps} steps of {P.dense.batch_size} x {P.dense.context} tokens"
      + (" (from the run cache)" if dense_metrics.get("cached") else f" in {dense_metrics['train_seconds']:.0f} s"))
print(f"dense validation perplexity: {dense_eval['perplexity']:.2f} over {dense_eval['windows']} windows")

# %% [markdown]
# ## Per-γ specialists: perplexity vs fraction of context pruned
#
# Each specialist starts from the dense weights plus fresh interaction modules ($r$ = 64, bias
# initialised at 4 so that fine-tuning starts close to dense) and is fine-tuned with
# $\text{CE} + \gamma\,\overline{I}$ while $\alpha$ goes 1 → 8. *Fraction pruned* is
# $1 - \overline{I}$ with hard decisions on validation: the share of (query, earlier token) pairs whose
# key/value the model no longer keeps, averaged over layers.

# %%
specialists, rows_by_gamma = {}, []
for gamma in P.gammas:
    model, metrics = study.pruned(gamma)
    specialists[gamma] = model
    rows_by_gamma.append({"gamma": gamma, **study.evaluate(model)})
pareto = pd.DataFrame(rows_by_gamma)
pareto["perplexity / dense"] = pareto.perplexity / dense_eval["perplexity"]
display(pareto[["gamma", "fraction_pruned", "perplexity", "perplexity / dense"]])
headline = closest_to(pareto, "fraction_pruned", P.target_pruned)
gamma80 = float(headline.gamma)
print(f"closest to {P.target_pruned:.0%} pruned: gamma={gamma80:g} prunes {headline.fraction_pruned:.1%} of the "
      f"context at {headline['perplexity / dense']:.3f}x the dense perplexity")

# %%
ordered = pareto.sort_values("gamma").fraction_pruned.tolist()
print(f"fraction pruned non-decreasing in gamma over {len(ordered)} specialists: "
      f"{all(a <= b + 1e-9 for a, b in zip(ordered, ordered[1:], strict=False))} (short fine-tunes: not guaranteed)")

# %%
# NBVAL_CHECK_OUTPUT
print(f"Pareto table: {len(pareto)} specialists, every one prunes some context with finite perplexity: "
      f"{bool((pareto.fraction_pruned > 0).all() and pareto.perplexity.map(math.isfinite).all())}")

# %% [markdown]
# ### The static baselines at equal sparsity
#
# The paper sets its learned pruning beside fixed sparse patterns that prune the same share of the context:
# a **local window** (each token sees the last $w$ tokens, itself included) and a **strided** pattern (the
# last `stride` tokens and every stride-th token before them). For each specialist we pick the $w$ and the
# stride whose pattern prunes closest to the specialist's fraction (`bab.context.static_masks`) and run the
# dense model with that mask.

# %%
static = pd.concat([study.static_baselines(dense, {"val": r.fraction_pruned}).assign(gamma=r.gamma)
                    for r in pareto.itertuples()], ignore_index=True)
curve = pd.concat([
    pd.DataFrame([{"text": "val", "family": "dense", "method": "dense", "fraction_pruned": 0.0,
                   "perplexity": dense_eval["perplexity"]}]),
    pareto.assign(text="val", family="learned (per gamma)", method=[f"gamma={g:g}" for g in pareto.gamma])[
        ["text", "family", "method", "fraction_pruned", "perplexity"]],
    static.assign(family=static.kind.map({"local": "local window", "strided": "strided"}))[
        ["text", "family", "method", "fraction_pruned", "perplexity"]],
], ignore_index=True)
display(curve.drop(columns="text").set_index("method"))
fig = plots_context.perplexity_vs_pruned(curve, title=f"GPT-2 context pruning vs static masks, profile {P.name}")
plt.show()
versus = pareto.set_index("gamma")[["fraction_pruned", "perplexity"]].join(
    static.groupby("gamma").perplexity.min().rename("best static perplexity"))
versus["learned / best static"] = versus.perplexity / versus["best static perplexity"]
display(versus)
print(f"learned pruning beats both static patterns at {int((versus['learned / best static'] < 1).sum())} of "
      f"{len(versus)} sparsities")

# %%
# NBVAL_CHECK_OUTPUT
print(f"static baselines: {len(static)} rows (local and strided per specialist): {len(static) == 2 * len(pareto)}")

# %% [markdown]
# #### Like for like: the masks fine-tuned as the specialists were
#
# The specialists also trained their weights for `P.finetune.steps` more steps, while the masks above run on the
# dense model as it was trained, so part of a learned-over-static ratio is that extra training. Here each matched
# mask is fine-tuned **under its mask** from the same dense weights with the specialists' data, steps and recipe
# (their training config with the plain next-token loss, `study.static_fine_tuned_baselines`), and the dense model
# is continued the same way without a mask (`study.dense_fine_tuned`): the like-for-like dense reference.

# %%
dense_ft, dense_ft_metrics = study.dense_fine_tuned()
dense_ft_eval = study.evaluate(dense_ft, prune=False)
print(f"dense continued for the specialists' {P.finetune.steps} steps: perplexity {dense_ft_eval['perplexity']:.2f} "
      f"(dense {dense_eval['perplexity']:.2f})")
static_ft, static_ft_models = study.static_fine_tuned_baselines(dict(zip(pareto.gamma, pareto.fraction_pruned,
                                                                         strict=True)))
versus_ft = pareto.set_index("gamma")[["fraction_pruned", "perplexity"]].join(
    static.pivot(index="gamma", columns="kind", values="perplexity").add_suffix(" untouched")).join(
    static_ft.pivot(index="gamma", columns="kind", values="perplexity").add_suffix(" fine-tuned"))
versus_ft["learned / best fine-tuned static"] = versus_ft.perplexity / static_ft.groupby("gamma").perplexity.min()
display(versus_ft)
fig = plots_context.perplexity_vs_pruned(pd.concat([
    pd.DataFrame([{"text": "val", "family": "dense", "fraction_pruned": 0.0, "perplexity": dense_ft_eval["perplexity"]}]),
    pareto.assign(text="val", family="learned (per gamma)")[["text", "family", "fraction_pruned", "perplexity"]],
    static_ft.assign(family=static_ft.kind.map({"local": "local window", "strided": "strided"}) + ", fine-tuned")[
        ["text", "family", "fraction_pruned", "perplexity"]],
], ignore_index=True), title=f"like for like (dense: continued as the specialists), profile {P.name}")
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
matched_ft = static_ft.set_index(["gamma", "kind"]).fraction_pruned
print(f"fine-tuned static baselines: {len(static_ft)} rows (local and strided per specialist): "
      f"{len(static_ft) == 2 * len(pareto)}; each prunes its untouched twin's fraction: "
      f"{matched_ft.equals(static.set_index(['gamma', 'kind']).fraction_pruned)}")

# %% [markdown]
# ## Generation with a KV cache that forgets
#
# `model.generate(prompt, past_key_values=PrunedCache())` (`bab.context.pruned_cache`, a transformers
# `Cache`): the prompt runs once (hard decisions) and only the tokens the last prompt token still sees stay
# in the cache. At every new token, each layer scores the cached interaction keys, **removes the dropped
# tokens' keys and values** (the live ones are gathered into new, smaller buffers; the old buffers are
# freed), appends the new token and attends. The check below generates greedily from real validation
# text with the ~80% specialist and compares every step with the full-sequence forward pass of the
# same model.

# %%
model80 = specialists[gamma80]
verdicts = cache_verdicts(model80, study.long_prompt(P.dense.context, 4), new_tokens=16)
print(f"max |cached - full| logit difference {verdicts['max_abs_diff']:.2e}; "
      f"live tokens at the end: {verdicts['live_fraction']:.1%} of the sequence")

# %%
# NBVAL_CHECK_OUTPUT
print(f"cached generation equals full forward: {verdicts['equals_full_forward']}")
print(f"dropped tokens never reappear: {verdicts['never_reappear']}")
print(f"cache shrinks: {verdicts['cache_shrinks']}")

# %% [markdown]
# ## Throughput and KV-cache memory, measured against dense
#
# Same process, one thread, the same validation prompts for every model, warm-up, then the repeats
# interleaved across models and the median reported (`bab.context.bench`). Every model generates through
# `model.generate()`: dense with transformers' in-place `StaticCache` (the fair baseline: every ratio is
# against it) and, beside it, its `DynamicCache` (which concatenates its whole cache at every step); the pruned
# models with the `PrunedCache`. Throughput counts the greedy decoding steps after the prompt (batch × (new
# tokens − 1) / decode time); the prompt's own time is in `prefill_ms`, and `end_to_end_ratio` compares prompt +
# generation. Each ratio stands beside its analytic limit: decoding by the bytes a step reads (weights and live
# cache), the prompt by its FLOPs (the interactions' scoring comes on top of dense's), end to end by both.
# Memory is the bytes held by the cache at the end of generation (for pruning including the interaction keys
# and slot positions), against the `DynamicCache`, which holds exactly the tokens seen. Other engineers share
# this machine's two cores, so absolute times are noisy; the ratios come from interleaved runs.

# %%
bench_models = {f"gamma={g:g}": specialists[g] for g in P.gammas}
throughput = {}
for prompt_len in P.bench_prompts:
    throughput[prompt_len] = study.throughput(bench_models, prompt_len=prompt_len)
    print(f"prompt {prompt_len} tokens, batch {P.bench_batch}, {P.bench_new_tokens} new tokens:")
    display(throughput[prompt_len][["tokens_per_s", "throughput_ratio", "decode_limit", "prefill_ratio",
                                    "end_to_end_ratio", "end_to_end_limit", "decode_ms", "prefill_ms",
                                    "cache_mb_end", "memory_ratio", "live_fraction"]])
long_context = max(P.bench_prompts)
print("speed-ups at the long context over the in-place dense, 95% intervals over the paired repeats:")
display(speedup_intervals(throughput[long_context]).round(3))
long80 = throughput[long_context].loc[f"gamma={gamma80:g}"]
print(f"gamma={gamma80:g} at the long context ({long_context} tokens): {long80.throughput_ratio:.2f}x dense "
      f"throughput, KV cache {long80.memory_ratio:.1f}x smaller, {long80.live_fraction:.1%} of tokens live at the end")
print(f"with the prompt pass included (prefill + decode): {long80.end_to_end_ratio:.2f}x dense")
live = throughput[long_context].attrs["live_by_layer"][f"gamma={gamma80:g}"]
print("live tokens at the end, per layer: " + ", ".join(f"layer {i} {f:.1%}" for i, f in enumerate(live)))

# %%
# NBVAL_CHECK_OUTPUT
print(f"throughput table configurations: {list(throughput[long_context].index)}")
print(f"long prompt >= 512 tokens: {long_context >= 512}")
print(f"pruned KV caches smaller than dense at the long context: "
      f"{bool((throughput[long_context].drop(['dense', DYNAMIC]).memory_ratio > 1).all())}")

# %% [markdown]
# ## Which tokens are dropped, and when
#
# A validation passage run through the ~80% specialist. For each layer (row) and token (column), the
# colour is how many later tokens saw it before it was dropped; white tokens are still kept at the end
# of the passage. The table below gives the same view as text (the position whose arrival dropped it).

# %%
passage = study.passage()
tokens = data.tokenizer.token_strings(passage[0].tolist())
times = token_drop_times(model80, passage)[:, 0]  # [L, T]
fig = plots_context.dropped_token_view(tokens, times, title=f"gamma={gamma80:g}: when each token is dropped")
plt.show()
display(plots_context.dropped_token_table(tokens, times).head(24).T)

# %% [markdown]
# The paper reports that punctuation and stop words are dropped first. Here is the share of each kind's
# (later query, layer) pairs that are pruned, beside its share of all tokens.

# %%
kinds = study.token_kinds(model80)
display(kinds)
fig = plots_context.token_kind_plot(kinds, title=f"gamma={gamma80:g}: fraction pruned by token kind")
plt.show()
order = kinds["fraction pruned"].sort_values(ascending=False)
print(f"most pruned kind: {order.index[0]} ({order.iloc[0]:.1%}); least: {order.index[-1]} ({order.iloc[-1]:.1%}); "
      f"all tokens {kinds.attrs['overall fraction pruned']:.1%}")

# %% [markdown]
# ## Beyond the paper: one checkpoint for several context budgets
#
# The interaction bias takes the requested keep budget $b$ through a learned non-negative sensitivity,
# $\beta_\ell(b) = \beta_\ell + \text{softplus}(\rho_\ell)\,\text{logit}(b)$, as the budgeted head
# gates do. One fine-tune samples $b \sim U[0.05, 0.8]$ per batch and minimises
# $\text{CE} + \lambda(\overline{I} - b)^2$ (Eq. 5 of the head-gates paper with the keep mass as the cost,
# penalised on both sides of $b$: with the one-sided $\max(0, \overline{I} - b)^2$ cross-entropy did not
# pull the kept fraction back up to $b$), for as many steps as one specialist. We then evaluate the single
# checkpoint at several budgets and compare with the per-γ specialists at the same fraction pruned (their curve
# interpolated; NaN where the checkpoint lands outside the specialists' range).
#
# The bias is affine in $\text{logit}(b)$ while the kept fraction of an irreversible hard mask is not, so the
# raw kept fraction drifts from $b$ (`kept (raw)`). A one-dimensional calibration on *training* windows
# (`study.calibrate_budget`: bisection for the budget to pass so that the checkpoint keeps $b$) removes the
# drift; `kept` is then measured on held-out text, which the calibration never sees.

# %%
budget_model, budget_metrics = study.budget_conditioned()
budgeted = study.budget_table(budget_model, P.budgets)
budgeted["specialists at same sparsity"] = budgeted.fraction_pruned.map(lambda f: interpolate_specialists(pareto, f))
budgeted["ratio to specialists"] = budgeted.perplexity / budgeted["specialists at same sparsity"]
display(budgeted)
fig = plots_context.perplexity_pareto(pareto, dense_eval["perplexity"], budgeted,
                                      title=f"GPT-2 context pruning, profile {P.name}")
plt.show()
kept = budgeted.sort_values("budget").kept.tolist()
tracks = budgeted["kept - budget"].abs().max()
raw_miss = (budgeted["kept (raw)"] - budgeted.budget).abs().max()
comparable = budgeted["ratio to specialists"].dropna()
print(f"kept fraction rises with the budget: {all(a <= b + 1e-9 for a, b in zip(kept, kept[1:], strict=False))}; "
      f"largest |kept - budget| {tracks:.3f} calibrated, {raw_miss:.3f} raw")
print("perplexity vs specialists at the same sparsity: "
      + (f"{comparable.min():.3f}x to {comparable.max():.3f}x over {len(comparable)} budgets"
         if len(comparable) else "no budget landed inside the specialists' range"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"budget-conditioned rows: {len(budgeted)} budgets, columns {list(budgeted.columns[:3])}")

# %% [markdown]
# ## Ablations (profile `paper`)
#
# The interaction width $r$ (32 / 64 / 128) and the irreversibility constraint, each fine-tuned at the
# ~80% γ. Without the cumulative product a token hidden from one query may be seen again by a later
# one, so its keys and values cannot leave the cache: the perplexity and fraction pruned are measured
# with masking, not with a shrinking cache.

# %%
ablation_rows, ablation_models = [], []
for r in P.r_ablation:
    model, _ = study.pruned(gamma80, r=r)
    ablation_models.append(model)
    ablation_rows.append({"ablation": f"r={r}", "irreversible": True, **study.evaluate(model)})
if P.irreversibility_ablation:
    model, _ = study.pruned(gamma80, irreversible=False)
    ablation_models.append(model)
    ablation_rows.append({"ablation": f"r={P.r}", "irreversible": False, **study.evaluate(model)})
ablations = pd.DataFrame(ablation_rows)
if len(ablations):
    display(ablations[["ablation", "irreversible", "fraction_pruned", "perplexity"]])
else:
    print(f"no ablations at profile {P.name} (profile paper runs r in (32, 64, 128) and irreversibility off)")

# %% [markdown]
# ## Our numbers beside the paper's
#
# Cost is the fraction of context kept; speed-up is the measured generation throughput ratio at the
# long context; memory_ratio is dense KV-cache bytes / ours. The text of the paper we work from gives its
# claims without a perplexity table, so the paper's row has no perplexity.

# %%
M = study.methods  # the rows this experiment declares (bab.experiments.methods)
rows = [
    study.result_row(M.dense, 1.0, dense_eval, speedup=1.0, memory_ratio=1.0, models=dense),
    *study.specialist_rows(rows_by_gamma, specialists, throughput[long_context]),
    study.generation_row(M.headline, 0.2, dict(headline), throughput[long_context], f"gamma={gamma80:g}",
                         note=f"gamma={gamma80:g}; throughput at a {long_context}-token prompt", models=model80),
    *study.budget_rows(budgeted, budget_model),
    *study.ablation_rows(ablation_rows, ablation_models),
    *study.static_rows(static, dense),
    study.result_row(M.dense_finetuned, 1.0, dense_ft_eval, models=dense_ft),
    *study.static_fine_tuned_rows(static_ft, static_ft_models),
    *study.token_kind_rows({study.texts[0]: kinds}, model80),
]
comparison = finish_notebook(rows, results_path, notebook_start, study.ledger)

# %%
# NBVAL_CHECK_OUTPUT
print(f"comparison table columns: {list(comparison.columns[:3])}")

# %% [markdown]
# ## What the papers' claims say on these rows
#
# The verdicts below are decided by the rules in `bab/report/claims/rules/`, as on the report's front page,
# here to this notebook's rows alone. At profile `smoke` the data are far too small for them to mean anything,
# so they are shown, not checked.

# %%
display(judgement_table(rows, ledger=study.ledger))
