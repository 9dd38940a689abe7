"""What notebooks 06 and 07 measure the same way on any decoder with dynamic context pruning.

A subclass of this ``bab.experiments.study.Study`` provides the data (``build()`` -> LMData), the texts it
evaluates on (``eval_ids(text)``, ``texts``), the evaluation window (``eval_context``), its profile
(``eval_windows``, ``view_tokens``), ``experiment`` (the name its result rows carry) and the fine-tunes the
references need (``dense_fine_tuned``, ``static_fine_tuned``). The rest is shared: fine-tuning through the run
cache, perplexity and fraction pruned on held-out windows (hard decisions), the static and training-free eviction
baselines matched to a specialist's fraction pruned, budget calibration, generation speed and KV-cache bytes
against dense, the dropped-token views, and the result rows (cost = fraction of context kept, perplexity beside it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

import bab.context
from bab.context.bench import generation_table
from bab.context.evaluate import evaluate_lm
from bab.context.evicting_cache import evaluate_eviction
from bab.context.eviction import H2O, TOVA, EvictionPolicy, StreamingLLM
from bab.context.static_masks import KINDS as STATIC_KINDS
from bab.context.static_masks import matched_size, pattern_mask
from bab.context.token_kinds import token_kind_breakdown
from bab.context.train import LMTrainConfig, train_lm
from bab.core import outcomes
from bab.core.timing import Repeats, repeat_times
from bab.core.training import seed_everything
from bab.experiments.study import Study, trained

# an evaluation's per-window units (bab.context.evaluate.evaluate_lm), recorded by result_row for the claims
WINDOW_UNITS = ("window_nll", "window_tokens", "unit_ids")


class DecoderStudy(Study):
    method = "context"
    method_code = bab.context

    # ------------------------------------------------------------------ what a subclass provides

    def build(self):
        raise NotImplementedError

    @property
    def eval_context(self) -> int:
        raise NotImplementedError

    def eval_ids(self, text: str) -> torch.Tensor:
        """The held-out token stream [N] of ``text``."""
        raise NotImplementedError

    @property
    def texts(self) -> tuple[str, ...]:
        """The texts ``evaluate`` knows, the first being the held-out split of the training text."""
        return ("val",)

    # ------------------------------------------------------------------ training through the cache

    def fine_tune(self, name: str, build, model_config: dict, train_config: LMTrainConfig, *, parent=None, init=None,
                  new_modules: tuple[str, ...] = (), trains=None, static_mask: tuple[str, int] | None = None,
                  **lineage):
        """Train one decoder of ``model_config`` (what determines the model a run builds) on the training stream
        (``train_lm``), or load it from the run cache: (what ``build`` made, metrics, lineage). ``build()`` makes
        what the cache stores (after seeding); ``init``: the decoder it starts from (``new_modules``: what it adds);
        ``trains``: the decoder that trains, when the cache stores only part of it; ``static_mask``: (kind, window or
        stride) of a static pattern (bab.context.static_masks) every training window attends under, part of the
        run's key; ``lineage``: what else determines the run."""
        mask = None if static_mask is None else pattern_mask(static_mask[0], train_config.context, static_mask[1])

        def fit(model, checkpoint):
            return trained(train_lm(model if trains is None else trains(), self.build().train_ids, train_config,
                                    progress=self.progress, checkpoint=checkpoint, attn_mask=mask))

        lineage = {"model": model_config, "train": train_config, "parent": parent, **lineage}
        if static_mask is not None:  # absent otherwise, so the keys of the runs without one stay as they were
            lineage["static_mask"] = {"kind": static_mask[0], "size": int(static_mask[1])}
        return self.train_cached(name, build, fit, lineage, seed=train_config.seed, init=init,
                                 new_modules=new_modules)

    # ------------------------------------------------------------------ measurements

    def evaluate(self, model, budget: float | None = None, prune: bool = True, text: str | None = None,
                 attn_mask: torch.Tensor | None = None, mask_name: str | None = None) -> dict:
        """Perplexity and fraction of context pruned on ``text``'s held-out windows (hard decisions). Through the
        run cache (``measured``) for a model a run names, unless an ``attn_mask`` comes without a ``mask_name``
        (what determines the mask, e.g. "local 37": its kind and size; the evaluation length is in the key).

        The result also holds ``window_nll`` and ``window_tokens`` (evaluate_lm), which ``result_row`` records for
        the claims' interval over windows; None where the measurement was stored before they were kept."""
        text = text or self.texts[0]

        def measure():
            seed_everything(0)
            return evaluate_lm(model, self.eval_ids(text), self.eval_context, budget=budget, prune=prune,
                               max_windows=self.profile.eval_windows, attn_mask=attn_mask)

        if attn_mask is not None and mask_name is None:  # nothing in a key would name the mask
            return measure()
        settings = {"text": text, "budget": budget, "prune": prune, "context": self.eval_context,
                    "windows": self.profile.eval_windows}
        if mask_name is not None:
            if attn_mask is None:
                raise ValueError(f"mask_name {mask_name!r} names a mask, but no attn_mask was passed")
            settings["mask"] = mask_name
        result = self.measured("evaluate", model, settings, measure)
        return {**result, **window_units(result)}

    def calibrate_budget(self, model, target: float, windows: int = 4, steps: int = 10) -> float:
        """The budget to pass to a budget-conditioned ``model`` so that it keeps ``target`` of the context on
        training windows (bisection on logit(b) in [-8, 8]; the hard kept fraction is monotone in b).

        The model's map from b to the bias is affine in logit(b) per layer, while the kept fraction of an
        irreversible hard mask is not, so the raw kept fraction drifts from b (too much kept at small b, too
        little at large b); a 1-D calibration on training text (never the held-out text it is judged on)
        removes the drift.
        """
        ids = self.build().train_ids
        lo, hi = -8.0, 8.0
        for _ in range(steps):
            mid = (lo + hi) / 2
            result = evaluate_lm(model, ids, self.eval_context, budget=float(torch.sigmoid(torch.tensor(mid))),
                                 max_windows=windows)
            if 1.0 - result["fraction_pruned"] < target:
                lo = mid
            else:
                hi = mid
        return float(torch.sigmoid(torch.tensor((lo + hi) / 2)))

    def budget_table(self, model, budgets, calibrate: bool = True) -> pd.DataFrame:
        """Requested vs delivered fraction of context kept on held-out text, raw and calibrated (calibrate_budget).

        ``table.attrs["windows"]``: {budget: {"window_nll": [...], "window_tokens": [...]}} of the evaluation whose
        perplexity the row reports (calibrated, or raw without calibration), for a result row's stats
        (``result_row(method, b, {**row, **table.attrs["windows"][b]})``). They stay out of the columns, which
        are printed whole."""
        rows, windows = [], {}
        for b in budgets:
            raw = self.evaluate(model, budget=b)
            row = {"budget": b, "kept (raw)": 1 - raw["fraction_pruned"], "perplexity (raw)": raw["perplexity"]}
            if calibrate:
                P = self.profile
                passed = self.calibrate_budget(model, b, windows=getattr(P, "calibration_windows", 4),
                                               steps=getattr(P, "calibration_steps", 10))
                result = self.evaluate(model, budget=passed)
                row.update({"passed budget": passed, "kept": 1 - result["fraction_pruned"],
                            "fraction_pruned": result["fraction_pruned"], "perplexity": result["perplexity"]})
            else:
                result = raw
                row.update({"kept": row["kept (raw)"], "fraction_pruned": raw["fraction_pruned"],
                            "perplexity": raw["perplexity"]})
            row["kept - budget"] = row["kept"] - b
            rows.append(row)
            windows[b] = window_units(result)
        table = pd.DataFrame(rows)
        table.attrs["windows"] = windows
        return table

    def static_baselines(self, dense, fractions: dict[str, float], kinds=STATIC_KINDS) -> pd.DataFrame:
        """The dense model with each static pattern matched to ``fractions`` ({text: fraction pruned}).

        Returns one row per (text, kind): the window or stride chosen, the fraction pruned it reaches
        at the evaluation length (the closest the pattern can get), the perplexity, and each window's summed
        log-likelihood and token count (``window_nll``, ``window_tokens``: lists, for a result row's stats).
        """
        rows = []
        for text, fraction in fractions.items():
            for kind in kinds:
                size = matched_size(kind, self.eval_context, fraction)
                rows.append(self._under_mask(dense, kind, size, text, fraction))
        return pd.DataFrame(rows)

    def _under_mask(self, model, kind: str, size: int, text: str, target: float) -> dict:
        """``model`` evaluated on ``text`` under the ``kind`` pattern of window or stride ``size`` at the evaluation
        length, matched to prune ``target``: the columns of a static baseline's row."""
        mask = pattern_mask(kind, self.eval_context, size)
        # the kind and size name the mask (the evaluation length is in every key)
        result = self.evaluate(model, prune=False, text=text, attn_mask=mask, mask_name=f"{kind} {size}")
        return {"text": text, "method": f"{kind} {'window' if kind == 'local' else 'stride'} {size}", "kind": kind,
                "size": size, "target": target, "fraction_pruned": result["fraction_pruned"],
                "perplexity": result["perplexity"], **window_units(result)}

    # ------------------------------------------------------------------ like-for-like references of the fine-tunes

    def plain_fine_tune_config(self) -> LMTrainConfig:
        """The specialists' fine-tune (``profile.finetune``) without what pruning adds: the same steps, windows,
        learning rate, schedule and seed, the plain next-token loss and no interactions. The like-for-like
        references train with it: the dense fine-tune and the static masks fine-tuned."""
        return replace(self.profile.finetune, objective="lm", gamma=0.0, sparsity_normalisation="causal_pairs")

    def dense_fine_tuned(self):
        """(the dense decoder fine-tuned with ``plain_fine_tune_config``, metrics): a subclass's."""
        raise NotImplementedError

    def static_fine_tuned(self, kind: str, size: int):
        """(the dense decoder fine-tuned under the ``kind`` pattern of window or stride ``size`` with
        ``plain_fine_tune_config``, metrics): a subclass's. Where the protocol freezes the decoder's weights there is
        nothing to fine-tune: the untouched decoder, its metrics saying ``"fine_tuned": False``."""
        raise NotImplementedError

    def static_fine_tuned_for(self, gamma: float, kind: str):
        """The ``kind`` mask matched to the ``gamma`` specialist's fraction pruned on the first text, fine-tuned under
        the mask, as ``static_fine_tuned_baselines`` asks for it (what ``python -m bab train`` runs ahead of the
        notebook): (model, metrics)."""
        fraction = self.evaluate(self.pruned(gamma)[0], text=self.texts[0])["fraction_pruned"]
        return self.static_fine_tuned(kind, matched_size(kind, self.eval_context, fraction))

    def static_fine_tuned_baselines(self, fractions: dict[float, float], kinds=STATIC_KINDS, texts=None
                                    ) -> tuple[pd.DataFrame, dict]:
        """The static patterns, each matched (at the evaluation length) to a specialist's fraction pruned on the
        first text, the held-out split of the training text (``fractions``: {gamma: fraction}, as
        ``static_baselines`` matches them), each fine-tuned under its mask (``static_fine_tuned``) and evaluated
        under the same mask on each of ``texts`` (default: all of them; a pattern prunes the same fraction of every
        text).

        Returns (one row per (gamma, kind, text) with ``static_baselines``' columns, "gamma" and "fine_tuned",
        {(kind, gamma): the model}). Two gammas matched to one pattern share its run."""
        rows, models = [], {}
        for gamma, fraction in fractions.items():
            for kind in kinds:
                size = matched_size(kind, self.eval_context, fraction)
                model, metrics = self.static_fine_tuned(kind, size)
                models[kind, gamma] = model
                for text in texts or self.texts:
                    rows.append({**self._under_mask(model, kind, size, text, fraction), "gamma": gamma,
                                 "fine_tuned": metrics.get("fine_tuned", True)})
        return pd.DataFrame(rows), models

    # ------------------------------------------------------------------ training-free eviction beside learned pruning

    @staticmethod
    def eviction_policies(fraction_kept: float) -> dict[str, EvictionPolicy]:
        """StreamingLLM, TOVA and H2O, each keeping ``fraction_kept`` of the tokens seen (``ceil(f * seen)`` after
        every call): fed token by token, a query then sees that share of its earlier tokens, the quantity learned
        pruning reports as 1 - fraction_pruned."""
        budget = float(fraction_kept)
        return {"StreamingLLM": StreamingLLM(budget), "TOVA": TOVA(budget), "H2O": H2O(budget)}

    def evaluate_evicting(self, dense, policy: EvictionPolicy, text: str | None = None) -> dict:
        """Perplexity and fraction of context pruned of the plain ``dense`` decoder under ``policy`` on ``text``'s
        held-out windows, fed token by token (``bab.context.evicting_cache.evaluate_eviction``), through the run
        cache; the same windows and keys as ``evaluate``, so rows pair window by window."""
        text = text or self.texts[0]

        def measure():
            seed_everything(0)
            return evaluate_eviction(dense, self.eval_ids(text), self.eval_context, policy,
                                     max_windows=self.profile.eval_windows)

        settings = {"text": text, "policy": policy.describe(), "context": self.eval_context,
                    "windows": self.profile.eval_windows}
        result = self.measured("evaluate-eviction", dense, settings, measure)
        return {**result, **window_units(result)}

    def eviction_table(self, dense, policies: dict[str, EvictionPolicy]) -> pd.DataFrame:
        """One row per (policy, text): fraction pruned, perplexity and its ratio to the dense decoder's, with each
        window's log-likelihood and token count (for a result row's stats)."""
        rows = []
        for text in self.texts:
            dense_perplexity = self.evaluate(dense, prune=False, text=text)["perplexity"]
            for name, policy in policies.items():
                result = self.evaluate_evicting(dense, policy, text)
                rows.append({"policy": name, "text": text, "budget": policy.describe(),
                             "fraction_pruned": result["fraction_pruned"], "perplexity": result["perplexity"],
                             "perplexity / dense": result["perplexity"] / dense_perplexity, **window_units(result)})
        return pd.DataFrame(rows)

    def long_prompt(self, length: int, batch: int, text: str | None = None) -> torch.Tensor:
        """``batch`` held-out passages of ``length`` tokens (consecutive, non-overlapping windows)."""
        ids = self.eval_ids(text or self.texts[0])
        needed = batch * length
        if len(ids) < needed:
            raise ValueError(f"held-out stream of {len(ids)} tokens is too short for {batch} prompts of {length}")
        return ids[:needed].view(batch, length)

    def throughput(self, models: dict | None = None, prompt_len: int | None = None, new_tokens: int | None = None,
                   batch: int | None = None, repeats: int | Repeats | None = None,
                   warmup: int | None = None) -> pd.DataFrame:
        """Generation throughput and KV-cache memory of dense and the pruned models at one prompt length.

        ``models``: name -> model, name -> (model, budget), or name -> an eviction policy (run on the dense decoder
        with an ``EvictingCache``); default: the specialists of
        ``profile.bench_gammas`` (all of ``profile.gammas`` when the profile has none). ``repeats``: a count or
        ``bab.core.timing.Repeats`` (default: the profile's).
        """
        P = self.profile
        prompt_len = prompt_len or P.bench_prompts[-1]
        new_tokens = new_tokens or P.bench_new_tokens
        batch = batch or P.bench_batch
        dense, _ = self.dense()
        if models is None:
            models = {f"gamma={g:g}": self.pruned(g)[0] for g in (getattr(P, "bench_gammas", ()) or P.gammas)}
        configs = {"dense": (dense, {"prune": False})}
        for name, spec in models.items():
            if isinstance(spec, EvictionPolicy):
                configs[name] = (dense, {"policy": spec})
                continue
            model, budget = spec if isinstance(spec, tuple) else (spec, None)
            configs[name] = (model, {"prune": True, "budget": budget})
        return generation_table(configs, self.long_prompt(prompt_len, batch), new_tokens,
                                warmup=P.bench_warmup if warmup is None else warmup,
                                repeats=repeats or P.bench_repeats)

    def passage(self, length: int | None = None, offset: int = 0, text: str | None = None) -> torch.Tensor:
        """One held-out passage [1, length] for the dropped-token view."""
        length = length or self.profile.view_tokens
        return self.eval_ids(text or self.texts[0])[offset: offset + length][None]

    def token_kinds(self, model, budget: float | None = None, windows: int = 16, text: str | None = None
                    ) -> pd.DataFrame:
        """Which kinds of tokens are dropped (punctuation, stop words, others), over held-out windows."""
        context = self.eval_context
        windows = min(self.profile.eval_windows, windows)
        ids = self.eval_ids(text or self.texts[0])[: context * windows].view(-1, context)
        table = token_kind_breakdown(model, ids, self.build().tokenizer, budget=budget)
        # the windows (a list: pandas compares attrs when it joins tables), so two kinds' rows pair window by window
        table.attrs["unit_ids"] = outcomes.unit_ids(ids).tolist()
        return table

    # ------------------------------------------------------------------ rows for the report

    def generation_row(self, method, budget, stats: dict, throughput: pd.DataFrame, name: str, *, models,
                       **extra) -> dict:
        """A row of ``stats`` with the generation speed of ``throughput``'s entry ``name`` (a
        ``bab.context.bench.generation_table``): its throughput and KV-memory ratios over dense, the decode
        limit, and the per-repeat times behind the ratio."""
        timed = throughput.loc[name]
        return self.result_row(method, budget, {**stats, **repeat_times(throughput, name)},
                               speedup=timed.throughput_ratio, memory_ratio=timed.memory_ratio,
                               analytic_limit=timed.decode_limit, models=models, **extra)

    def specialist_rows(self, evaluations: list[dict], models: dict,
                        throughput: pd.DataFrame | None = None) -> list[dict]:
        """The pruning specialists, one row per gamma (``evaluations``: each an ``evaluate`` with its "gamma";
        ``models``: {gamma: model}); with ``throughput`` (entries "gamma=<g>") each row also carries its measured
        generation speed (``generation_row``)."""
        method = self.methods.specialist
        return [self.result_row(method, None, e, settings={"gamma": e["gamma"]}, models=models[e["gamma"]])
                if throughput is None else
                self.generation_row(method, None, e, throughput, f"gamma={e['gamma']:g}",
                                    settings={"gamma": e["gamma"]}, models=models[e["gamma"]])
                for e in evaluations]

    def static_rows(self, static: pd.DataFrame, dense) -> list[dict]:
        """The dense model under static masks matched to the specialists' sparsity (``static_baselines``' table
        with a "gamma" column), one row per (kind, gamma)."""
        return [self.result_row(self.methods.static, None, r, settings={"kind": r["kind"], "gamma": r["gamma"]},
                                note=r["method"], models=dense) for r in static.to_dict("records")]

    def static_fine_tuned_rows(self, table: pd.DataFrame, models: dict) -> list[dict]:
        """The static masks fine-tuned under their mask (``static_fine_tuned_baselines``' table and models), one row
        per (kind, gamma) of each text in ``table`` (the notebooks pass the first text's)."""
        return [self.result_row(self.methods.static_finetuned, None, r,
                                settings={"kind": r["kind"], "gamma": r["gamma"]},
                                note=r["method"] + ("" if r["fine_tuned"] else "; weights frozen by the protocol: "
                                                    "nothing to fine-tune"),
                                models=models[r["kind"], r["gamma"]]) for r in table.to_dict("records")]

    def budget_rows(self, budgeted: pd.DataFrame, model) -> list[dict]:
        """The budget-conditioned model at each budget of its ``budget_table`` (with each evaluation's windows)."""
        return [self.result_row(self.methods.budgeted, r["budget"], {**r, **budgeted.attrs["windows"][r["budget"]]},
                                models=model) for r in budgeted.to_dict("records")]

    def ablation_rows(self, evaluations: list[dict], models: list) -> list[dict]:
        """The ablations of the interaction (its width r, irreversibility off), each an ``evaluate`` with its
        "ablation" name and "irreversible" flag, beside the models measured (in order)."""
        return [self.result_row(self.methods.ablation, None, e,
                                settings={"ablation": e["ablation"], "irreversible": bool(e["irreversible"])},
                                models=model) for e, model in zip(evaluations, models, strict=True)]

    def eviction_rows(self, table: pd.DataFrame, fraction_kept: float) -> list[dict]:
        """One row per (policy, text) of ``eviction_table``: perplexity and fraction pruned with each window's units
        (the measured model is the downloaded or trained dense decoder)."""
        dense, _ = self.dense()
        return [self.result_row(self.methods.eviction, fraction_kept, r, settings={"policy": r["policy"],
                                                                                  "text": r["text"]},
                                note=r["budget"], models=dense) for r in table.to_dict("records")]

    def token_kind_rows(self, tables: dict[str, pd.DataFrame], model) -> list[dict]:
        """Result rows of ``tables`` ({text: ``token_kinds`` table}) measured on ``model``: one per (text, kind),
        its value the % of the kind's pairs pruned."""
        method = self.methods.token_kinds
        return [self.result_row(method, None, {**table.attrs.get("windows", {}).get(kind, {}),
                                               "unit_ids": table.attrs.get("unit_ids")},
                                settings={"kind": kind, "text": text}, value=100.0 * float(share), models=model)
                for text, table in tables.items() for kind, share in table["fraction pruned"].items()]

    def row_columns(self, stats: dict) -> dict:
        """An evaluation's (``evaluate``) columns: cost = fraction of context kept, its perplexity, no accuracy
        (all None for a row measured by its ``value`` alone); a zero-shot row's ``accuracy`` (%) where it has one."""
        if "fraction_pruned" not in stats:
            return {"cost": None, "accuracy": None, "perplexity": None}
        return {"cost": 1.0 - stats["fraction_pruned"], "accuracy": stats.get("accuracy"),
                "perplexity": stats.get("perplexity")}


def window_units(result: dict) -> dict:
    """The per-window units of an evaluation (``evaluate``): ``window_nll``, ``window_tokens`` and ``unit_ids``, each
    None for a measurement stored before evaluations kept them (its rows then have no interval over windows). None
    rather than absent, so a table of several evaluations has None in the gaps, never NaN, which a row's stats would
    take for a measurement."""
    return {key: result.get(key) for key in WINDOW_UNITS}


def closest_to(points: pd.DataFrame, column: str, target: float):
    """The row of ``points`` whose ``column`` is closest to ``target``."""
    return points.loc[(points[column] - target).abs().idxmin()]


def interpolate_specialists(specialists: pd.DataFrame, fraction_pruned: float) -> float:
    """Perplexity of the per-gamma specialists' curve at ``fraction_pruned`` (linear; NaN outside their range)."""
    s = specialists.sort_values("fraction_pruned")
    x, y = s.fraction_pruned.to_numpy(), s.perplexity.to_numpy()
    if len(x) < 2 or not x[0] <= fraction_pruned <= x[-1]:
        return float("nan")
    return float(np.interp(fraction_pruned, x, y))
