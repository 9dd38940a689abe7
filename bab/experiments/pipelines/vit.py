"""Sparsifiner and its baselines on a ViT: ``ViTStudy``, the steps notebook 05 trains and the result rows it builds,
and ``cached_sparsifiner``, its phase-2 model read back from the run cache.

Every trained model goes through the run cache (``bab.experiments.study.Study``), keyed by its whole lineage
(data, model, training, and the run it started from), so the notebook re-runs in seconds once its models exist:

    dense teacher -> Sparsifiner phase 1 (predictor) -> phase 2 (joint), once per predictor preset
                                                     -> Sparsif-EViT: phase 2 with its tokens pruned (Table 1)
                  -> Linformer at the same budget (warm start, same recipe as phase 2)
                  -> budgeted head gates (warm start, Eq. 5) -> hard top-k heads (Eq. 6, straight-through)
                  -> EViT fine-tuned with its tokens pruned (warm start, CE; Table 1)

and the dense -> phase 1 -> phase 2 chain again at 197 tokens (``bab.experiments.vit.ViT197Study``), beside the
50-token model trained with the same recipe (``token_count_control``).

Every model is transformers' ``ViTForImageClassification`` with the methods attached: Sparsifiner, Linformer and
EViT by ``bab.sparsifiner`` (``build_vit``), the head gates by the heads method (``bab.heads.attach`` through
``GatedHFClassifier``), trained by its own loop and recipe options (``bab.heads.train.TrainConfig``).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import cache

import pandas as pd

import bab.sparsifiner
from bab.core.outcomes import keep_units, row_units
from bab.core.runs import LoadOnlyRunCache, RunCache, config_difference
from bab.core.timing import repeat_times
from bab.data.images import image_splits, load_fashion_mnist
from bab.experiments.pipelines.vit_profile import (
    EVIT_FINE_TUNE,
    GATE_INIT_LOGIT,
    PresetChoice,
    ViTProfile,
    hard_heads,
    predictor_preset,
)
from bab.experiments.study import Study, as_run_cache, trained
from bab.heads import train as heads_train
from bab.heads.evaluate import evaluate as evaluate_heads
from bab.heads.hf_encoder import GatedHFClassifier
from bab.sparsifiner.evaluate import evaluate_vit
from bab.sparsifiner.predictor import num_connections
from bab.sparsifiner.train import ViTTrainConfig, train_vit
from bab.sparsifiner.vit import LINFORMER_MODULE, PREDICTOR_MODULE, ViTClassifierConfig, build_vit, num_tokens


@cache
def _cached_splits(num_train: int, num_val: int, num_test: int, seed: int, path: str | None):
    return image_splits(load_fashion_mnist(path), num_train, num_val, num_test, seed)


class ViTStudy(Study):
    experiment = "vit_sparsifiner"
    method = "sparsifiner"
    method_code = bab.sparsifiner

    def __init__(self, profile, cache: RunCache | None = None, progress: bool = True, data_path=None, ledger=None,
                 seed: int | None = None):
        """``seed``: the split seed and every training's seed, of the profile and of its 197-token variant (a run of
        notebook 05 at one of the record's seeds trains its own models); None keeps the profile's ``seed``."""
        if seed is not None:
            profile = with_seed(profile, seed)
        super().__init__(profile, cache, progress, ledger)
        self.data_path = data_path

    # -- data and shapes --------------------------------------------------------------------

    def splits(self) -> dict:
        p = self.profile
        return _cached_splits(p.num_train, p.num_val, p.num_test, p.seed,
                              None if self.data_path is None else str(self.data_path))

    def data_lineage(self) -> dict:
        p = self.profile
        return {"dataset": "fashion_mnist", "num_train": p.num_train, "num_val": p.num_val, "num_test": p.num_test,
                "seed": p.seed}

    def model_config(self, **extra) -> ViTClassifierConfig:
        return ViTClassifierConfig(**self.profile.model, **extra)

    def sparsifiner_config(self) -> ViTClassifierConfig:
        p = self.profile
        return self.model_config(connectivity=p.connectivity)

    def linformer_len(self) -> int:
        """Linformer's projection length = the Sparsifiner budget k at the comparison keep rate (Table 4)."""
        return num_connections(self.profile.linformer_keep_rate, self.model_config().num_tokens)

    # -- training through the cache ---------------------------------------------------------

    def _train(self, name, model_config, train_config, parent=None, init=None, new_modules=(), teacher=None,
               prepare=None, select=None, **lineage):
        """Build, warm-start (from ``init``, adding ``new_modules``) and train one ViT, or load it from the run
        cache. ``prepare(model)`` runs after the warm start and before training (e.g. the gate start);
        ``select``: train_vit's selection; ``lineage``: what else determines the run (how ``prepare`` and
        ``select`` work)."""
        lineage = {"model": model_config, "train": train_config, "parent": parent, **lineage}

        def fit(model, checkpoint):
            if prepare is not None:
                prepare(model)
            return trained(train_vit(model, self.splits()["train"], train_config, teacher=teacher,
                                     progress=self.progress, select=select, checkpoint=checkpoint))

        return self.train_cached(name, lambda: self.build(model_config), fit, lineage, seed=train_config.seed,
                                 init=init, new_modules=new_modules)

    def build(self, model_config: ViTClassifierConfig):
        """A fresh model of ``model_config`` (transformers' ViT with Sparsifiner attached, random weights)."""
        return build_vit(model_config)

    def dense(self):
        return self._train("dense", self.model_config(), replace(self.profile.dense, seed=self.profile.seed))

    def predictor(self):
        """Phase 1: predictors trained on the frozen dense backbone (attention distillation)."""
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.phase1, seed=self.profile.seed)
        return self._train("phase1", self.sparsifiner_config(), config, parent=dense_lineage, init=dense,
                           new_modules=(PREDICTOR_MODULE,))

    def sparsifiner(self):
        """Phase 2: backbone and (frozen) predictors under sparse attention, distilled from the dense teacher."""
        dense, _, _ = self.dense()
        phase1, _, phase1_lineage = self.predictor()
        config = replace(self.profile.phase2, seed=self.profile.seed)
        return self._train("phase2", self.sparsifiner_config(), config, parent=phase1_lineage, init=phase1,
                           teacher=dense)

    def evit_config(self, token_keep: float) -> ViTTrainConfig:
        """EViT's fine-tune at ``token_keep``: ``EVIT_FINE_TUNE`` for ``evit_epochs`` with the profile's
        prune layers."""
        p = self.profile
        return replace(EVIT_FINE_TUNE, epochs=p.evit_epochs, seed=p.seed, token_keep=token_keep,
                       prune_layers=p.prune_layers)

    def evit(self, token_keep: float):
        """EViT fine-tuned (Table 1's baseline): the dense ViT warm-started and trained with CE while its tokens are
        pruned (``token_keep`` after the attention of ``prune_layers``), so it adapts to the pruning it is evaluated
        with. Evaluate it with the same ``token_keep`` and ``prune_layers``."""
        dense, _, dense_lineage = self.dense()
        return self._train("evit", self.model_config(), self.evit_config(token_keep), parent=dense_lineage,
                           init=dense)

    def evit_sparsifiner_config(self, token_keep: float) -> ViTTrainConfig:
        """Sparsif-EViT's phase 2 at ``token_keep``: the profile's phase 2 (its keep-rate draw and losses, so only
        the pruning tells it from the Sparsifiner rows' model) for ``evit_epochs`` with the tokens pruned."""
        p = self.profile
        return replace(p.phase2, epochs=p.evit_epochs, seed=p.seed, token_keep=token_keep,
                       prune_layers=p.prune_layers)

    def evit_sparsifiner(self, token_keep: float):
        """Sparsif-EViT (Table 1): Sparsifiner's phase 2 trained with the tokens pruned, distilled from the dense
        teacher. It starts from phase 1, not from the phase-2 checkpoint: the paper has one training recipe, two
        phases (predictor, then backbone), and Table 1 names no other for Sparsif-EViT, so we read it as that recipe
        with token pruning on: the backbone learns sparse attention and token pruning in one phase 2, and gets no
        more fine-tuning than the EViT it is compared with. Evaluate it
        with attention="masked" (or "sparse") at ``combo_keep_rate``, ``token_keep`` and ``prune_layers``."""
        dense, _, _ = self.dense()
        phase1, _, phase1_lineage = self.predictor()
        return self._train("sparsif-evit", self.sparsifiner_config(), self.evit_sparsifiner_config(token_keep),
                           parent=phase1_lineage, init=phase1, teacher=dense)

    def linformer(self):
        dense, _, dense_lineage = self.dense()
        # phase 2's recipe without its predictor options (a Linformer model has no predictor to train)
        config = replace(self.profile.phase2, objective="linformer", seed=self.profile.seed, joint_predictor=False,
                         lambda_attn_joint=0.0)
        return self._train("linformer", self.model_config(linformer_len=self.linformer_len()), config,
                           parent=dense_lineage, init=dense, new_modules=(LINFORMER_MODULE,), teacher=dense)

    def gated(self, model) -> GatedHFClassifier:
        """``model`` (a ViT of this study) behind the heads method's interface, with budget gates (Eq. 1)."""
        return GatedHFClassifier.from_hf(model, "fashion-mnist ViT", gates="budget", gate_init_logit=GATE_INIT_LOGIT)

    def dense_gateless(self) -> GatedHFClassifier:
        """A copy of the dense ViT behind the heads method's interface without gates: the warm start of the
        budgeted heads (its weights under the same names) and the dense teacher of the hard adaptation."""
        dense, _, _ = self.dense()
        return GatedHFClassifier.from_hf(copy.deepcopy(dense), "fashion-mnist ViT", gates=None)

    def _train_heads(self, name, config: heads_train.TrainConfig, parent, init, teacher=None, select=None,
                     **lineage):
        """One budgeted-heads step on this study's ViT (``bab.heads.train``), or its model from the run cache."""
        model_key = {**config_difference(self.model_config()), "gates": "budget", "gate_init_logit": GATE_INIT_LOGIT}
        lineage = {"model": model_key, "train": config, "parent": parent, **lineage}

        def fit(model, checkpoint):
            return trained(heads_train.train(model, self.splits()["train"], config, teacher=teacher,
                                             progress=self.progress, select=select, checkpoint=checkpoint))

        return self.train_cached(name, lambda: self.gated(self.build(self.model_config())), fit, lineage,
                                 seed=config.seed, init=init, new_modules=("gates",))

    def budgeted_heads(self):
        """Budgeted head gates (Eq. 5) warm-started from the dense ViT, gates started as the recipe's
        ``gate_start`` says (``bab.heads.train.initialise_gates_``)."""
        _, _, dense_lineage = self.dense()
        return self._train_heads("heads", replace(self.profile.heads, seed=self.profile.seed), dense_lineage,
                                 self.dense_gateless())

    def hard_heads_config(self) -> heads_train.TrainConfig:
        """The hard adaptation's recipe: the soft step's settings with Eq. 6 distilled from the dense ViT."""
        return hard_heads(replace(self.profile.heads, seed=self.profile.seed))

    def budgeted_heads_hard(self, select: bool = True):
        """The soft budgeted-head checkpoint adapted to hard top-k heads (Eq. 6: straight-through, distilled from
        the dense ViT).

        ``select``: keep the adapted weights of the epoch with the best mean hard top-k accuracy on validation over
        ``head_budgets``, or the soft checkpoint's if none beats it (``bab.heads.train``'s selection, the text
        studies' ``adaptation.keep_unadapted``); ``metrics["selected_epoch"]`` is then 0 (what
        ``bab.experiments.pipelines.hard_recipe.adaptation_kept`` reads), and ``metrics["val_hard_mean"]`` holds the
        unadapted and the last epoch's means. ``select=False``: the adapted model whatever validation says (the
        gate-start ablation); a run of its own in the cache (the lineage says whether it selected).
        """
        soft, _, soft_lineage = self.budgeted_heads()
        budgets = self.profile.head_budgets
        score = None
        if select:
            def score(model):
                val = self.splits()["val"]
                accuracies = [evaluate_heads(model, val, budget=b, mode="hard")["accuracy"] for b in budgets]
                return sum(accuracies) / len(budgets)
        hard, metrics, lineage = self._train_heads(
            "heads-hard", self.hard_heads_config(), soft_lineage, soft, teacher=self.dense_gateless(), select=score,
            selection={"mean hard validation accuracy at": list(budgets)} if select else None)
        if select:
            history = metrics["history"]  # epoch 0: the unadapted weights; the last row: the adapted ones
            metrics = {**metrics, "val_hard_mean": {"unadapted": history[0]["selection"],
                                                    "adapted": history[-1]["selection"]}}
        return hard, metrics, lineage

    def with_profile(self, profile: ViTProfile) -> ViTStudy:
        """This study (its class, data, run cache) on another profile: a predictor preset, or a variant."""
        other = copy.copy(self)
        other.profile = profile
        return other

    def preset_study(self, preset: str) -> ViTStudy:
        """This study with the predictor preset ``preset`` (``predictor_preset``); "profile" is this study's own."""
        return self.with_profile(predictor_preset(self.profile, preset))

    def training_seconds(self) -> dict[str, float]:
        """Seconds of training of the dense teacher, phase 1 and phase 2, as recorded when each was trained (a model
        served from the run cache reports the time it took then)."""
        return {name: float(step()[1]["train_seconds"])
                for name, step in (("dense", self.dense), ("phase 1", self.predictor), ("phase 2", self.sparsifiner))}

    # -- evaluation -------------------------------------------------------------------------

    def keep_rate_sweep(self, model, keep_rates, split: str = "test", attention: str = "masked") -> pd.DataFrame:
        """Accuracy and analytic MHSA cost at each keep rate (one checkpoint). ``masked`` is numerically
        equal to ``sparse`` (tested) and faster at these short sequences; the notebook checks it on a batch."""
        return pd.DataFrame(self._rate_rows(model, keep_rates, split, attention))

    def _rate_rows(self, model, keep_rates, split: str, attention: str) -> list[dict]:
        """``model``'s evaluation at each keep rate on ``split``, with its keep rate and connections per query."""
        return [{"keep_rate": rate, "connections": num_connections(rate, num_tokens(model)),
                 **evaluate_vit(model, self.splits()[split], attention=attention, keep_rate=rate)}
                for rate in keep_rates]

    def retention(self, keep_rates, split: str = "test", attention: str = "masked") -> pd.DataFrame:
        """The dense teacher and phase 2 at each of ``keep_rates`` on ``split``: one row per keep rate (the dense
        model's row has keep rate None) with accuracy (%), "vs dense" (points against the dense model on the same
        images), "retention" (accuracy / dense accuracy) and MHSA cost. ``attention``: the Sparsifiner core
        ("masked", or "fused" for the same connections faster at inference)."""
        dense, _, _ = self.dense()
        model, _, _ = self.sparsifiner()
        reference = evaluate_vit(dense, self.splits()[split])
        rows = [{"model": "dense", "keep_rate": None, "connections": num_tokens(model), **reference},
                *({"model": "sparsifiner", **row} for row in self._rate_rows(model, keep_rates, split, attention))]
        table = pd.DataFrame(rows)
        table["vs dense"] = table.accuracy - reference["accuracy"]
        table["retention"] = table.accuracy / reference["accuracy"]
        return keep_units(table[["model", "keep_rate", "connections", "accuracy", "vs dense", "retention", "cost"]],
                          rows)

    # -- result rows: what notebook 05 measured, as the report's rows -------------------------------

    def sparsifiner_rows(self, *, dense, dense_test: dict, sparsifiner, sweep: pd.DataFrame, phase1,
                         phase1_sweep: pd.DataFrame) -> list[dict]:
        """The dense teacher (``dense_test``: its ``evaluate_vit``), phase 2 at each keep rate of ``sweep`` and
        phase 1 alone at each of ``phase1_sweep`` (``keep_rate_sweep`` tables, which keep each image's outcome)."""
        M = self.methods
        return [self.result_row(M.dense, 1.0, dense_test, models=dense, note=self.profile.protocol),
                *[self.result_row(M.sparsifiner, r["keep_rate"], dict(r), models=sparsifiner)
                  for _, r in sweep.iterrows()],
                *[self.result_row(M.phase1_only, r["keep_rate"], dict(r), models=phase1)
                  for _, r in phase1_sweep.iterrows()]]

    def token_pruning_rows(self, *, dense, sparsifiner, untrained: dict, finetuned: dict) -> list[dict]:
        """EViT token pruning and Sparsifiner on top of it: ``untrained`` {token keep: (EViT on the dense model,
        EViT + Sparsifiner on phase 2)} evaluations without fine-tuning, and ``finetuned`` {token keep: (EViT model,
        its evaluation, Sparsif-EViT model, its evaluation)} as the paper trains them."""
        M, P = self.methods, self.profile
        rows = []
        for token_keep, (evit, combo) in untrained.items():
            rows += [self.result_row(M.evit, token_keep, evit, note="no fine-tuning", models=dense),
                     self.result_row(M.evit_sparsifiner, P.combo_keep_rate, combo, settings={"token_keep": token_keep},
                                     models=sparsifiner)]
        for token_keep, (evit_model, evit_stats, combo_model, combo_stats) in finetuned.items():
            rows += [self.result_row(M.evit_finetuned, token_keep, evit_stats, models=evit_model,
                                     note=f"fine-tuned {P.evit_epochs} epochs with its tokens pruned"),
                     self.result_row(M.evit_sparsifiner_finetuned, P.combo_keep_rate, combo_stats,
                                     settings={"token_keep": token_keep}, models=combo_model,
                                     note=f"phase 2 with its tokens pruned, {P.evit_epochs} epochs from phase 1")]
        return rows

    def linformer_row(self, linformer, linformer_test: dict) -> dict:
        """Linformer at Sparsifiner's number of connections at the profile's Linformer keep rate."""
        return self.result_row(self.methods.linformer, None, linformer_test, models=linformer,
                               note=f"projection length {self.linformer_len()}: Sparsifiner's connections at keep "
                                    f"{self.profile.linformer_keep_rate:g}")

    def head_rows(self, heads_hard, hard_stats: dict) -> list[dict]:
        """Budgeted head gates on this ViT, hard top-k: {budget: ``bab.heads.evaluate.evaluate`` of the hard-adapted
        model}."""
        return [self.result_row(self.methods.heads, b, stats, models=heads_hard) for b, stats in hard_stats.items()]

    def preset_rows(self, preset_tables: dict, choice: PresetChoice) -> list[dict]:
        """Phase 2 of every predictor preset at the report's keep rates ({preset: its ``retention`` table on test}),
        each row noting the preset's validation score and whether validation chose it."""
        rows = []
        for name, table in preset_tables.items():
            model, _, _ = self.preset_study(name).sparsifiner()
            note = (f"mean validation accuracy vs dense {choice.table.loc[name, 'mean vs dense']:+.2f} points; "
                    f"chosen on validation: {name == choice.chosen}")
            rows += [self.result_row(self.methods.preset, r.keep_rate, {"cost": r.cost, "accuracy": r.accuracy,
                                                                        **row_units(table, r.Index)},
                                     settings={"preset": name}, models=model, note=note)
                     for r in table.iloc[1:].itertuples()]
        return rows

    def retention_rows(self, table: pd.DataFrame, dense_note: str, sparsifiner_note: str) -> list[dict]:
        """This study's dense model and phase 2 at each keep rate, from its ``retention`` table."""
        M = self.methods
        dense, _, _ = self.dense()
        model, _, _ = self.sparsifiner()
        dense_stats = {**table.iloc[0].to_dict(), **row_units(table, table.index[0])}
        return [self.result_row(M.dense, 1.0, dense_stats, models=dense,
                                note=dense_note),
                *[self.result_row(M.sparsifiner, r.keep_rate, {"cost": r.cost, "accuracy": r.accuracy,
                                                               **row_units(table, r.Index)},
                                  models=model, note=sparsifiner_note) for r in table.iloc[1:].itertuples()]]

    def attention_speed_rows(self, bench: pd.DataFrame) -> list[dict]:
        """One MHSA layer of DeiT-S's shape timed dense against Sparsifiner (``bench_sparse_attention``), at each
        length and keep rate: the fused kernel's speed-up where it could be built, else the torch path's (the note
        says which), with the per-repeat times behind it. Random weights: no trained model."""
        rows = []
        for _, r in bench.iterrows():
            fused = not pd.isna(r["fused speed-up"])
            tokens = int(r["tokens"])
            path = f"{tokens} {'fused' if fused else 'sparse'} {r['keep_rate']}"
            rows.append(self.result_row(
                self.methods.attention_speed, r["keep_rate"],
                {"cost": 1 / r["FLOP ratio"], "accuracy": None,
                 **repeat_times(bench, path, baseline=f"{tokens} dense")},
                speedup=r["fused speed-up"] if fused else r["measured speed-up"], analytic_limit=r["FLOP ratio"],
                settings={"tokens": tokens}, models=(),
                note="one MHSA layer, DeiT-S shape, 1 thread; cost = counted FLOP fraction; "
                     + ("fused kernel" if fused else "torch path (no fused build)")))
        return rows


def with_seed(profile: ViTProfile, seed: int) -> ViTProfile:
    """``profile`` (and its 197-token variant) at ``seed``: the data split and every training of the study."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be a whole number (e.g. 7, 13 or 21) or None for the profile's, got {seed!r}")
    variant = None if profile.variant_197 is None else replace(profile.variant_197, seed=seed)
    return replace(profile, seed=seed, variant_197=variant)


def cached_sparsifiner(profile: ViTProfile, cache: RunCache | str | None = None):
    """Notebook 05's phase-2 Sparsifiner model at ``profile`` from the run cache (default ``$BAB_CACHE_DIR``), in
    eval mode; never trains. Raises ``bab.core.runs.CacheMiss`` when it (or the dense model or phase 1 it
    starts from) is not cached for this code version and thread count: run notebook 05 first (``python -m bab
    report --only 05 --profile <name>``) with the ``$BAB_THREADS`` it will be loaded with."""
    study = ViTStudy(profile, LoadOnlyRunCache(as_run_cache(cache).root), progress=False)
    model, _, _ = study.sparsifiner()
    return model
