"""Notebooks 03 and 04's study: ``BertStudy`` (the custom AG News study's steps on a pretrained Hugging Face encoder,
plus structural pruning, timing and the post-hoc structural baseline), the rows it declares and the rows it
builds."""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import cache

import pandas as pd
import torch

from bab.core.runs import RunCache, tag_as
from bab.data.text import PretrainedTokenizer, build_text_classification, sort_by_length
from bab.experiments.methods import methods
from bab.experiments.text import TextStudy
from bab.heads.bench import reloaded_latency
from bab.heads.evaluate import evaluate
from bab.heads.hf_encoder import GatedHFClassifier, HFEncoderConfig, load_classifier, load_tokenizer
from bab.heads.hf_pruning import kept_heads, prune_heads, pruned_copy
from bab.heads.posthoc import head_importance, posthoc_mask

# The rows notebooks 03 and 04 report: (attribute, method name, mechanism, budget kind, origin[, settings, value])
_BERT_ROWS = (
    ("dense", "dense", "none", "dense", "paper"),
    ("hard_adapted", "budgeted hard-adapted", "heads", "fraction", "paper"),
    ("warm", "warm-start budgeted", "heads", "fraction", "paper"),
    ("soft_sweep", "soft sweep", "heads", "fraction", "paper"),
    ("structural", "budgeted structural", "heads", "fraction", "paper"),
    ("gate_ranking", "gate ranking", "heads", "none", "paper", (),
     "Spearman rank correlation of the budgeted gates at b = 0.25 and 0.75"),
)
BERT_AG_NEWS_METHODS = methods(
    "bert_ag_news", *_BERT_ROWS,
    ("static_hard", "static hard specialist", "heads", "fraction", "baseline"),
    ("posthoc", "dense post-hoc structural", "heads", "fraction", "baseline"),
    ("posthoc_recovered", "dense post-hoc + recovery", "heads", "fraction", "baseline"),
    # the analytic compute of structural pruning, on our model and on a random-weight model of the paper's shape
    ("compute", "compute, structural", "heads", "fraction", "paper", ("model",),
     "% of the transformer layers' MACs removed at the paper's length, 128 tokens"),
)
BERT_DBPEDIA_METHODS = methods("bert_dbpedia14", *_BERT_ROWS)
# the DistilBERT pilot of section 6.5 (hub only; notebook 03)
PILOT_EXPERIMENT = "distilbert_ag_news"
PILOT_METHODS = methods(
    PILOT_EXPERIMENT,
    ("dense", "dense", "none", "dense", "paper"),
    ("dense_continued", "dense continued", "none", "dense", "paper"),  # the paper's longer-trained control
    ("warm", "warm-start budgeted", "heads", "fraction", "paper"),
    ("posthoc", "dense post-hoc", "heads", "fraction", "baseline"),
)
METHOD_SETS = (BERT_AG_NEWS_METHODS, BERT_DBPEDIA_METHODS, PILOT_METHODS)


def pilot_unavailable_row(note: str) -> dict:
    """The pilot's dense row with no numbers, for a machine without its weights: the report shows it as not run."""
    return {"experiment": PILOT_EXPERIMENT, "method": PILOT_METHODS.dense.name, "budget": 1.0, "cost": None,
            "accuracy": None, "speedup": None, "note": note}


class BertStudy(TextStudy):
    def __init__(self, profile, experiment: str, cache: RunCache | None = None, progress: bool = True,
                 seed: int | None = None, data_path=None, model: str | None = None, ledger=None):
        if model is not None:
            profile = replace(profile, model=model)
        super().__init__(profile, experiment, cache=cache, progress=progress, seed=seed, data_path=data_path,
                         ledger=ledger)

    # -- data: the model's own tokenizer, evaluation splits sorted by length -------------------

    def build(self, max_len: int | None = None):
        p = self.profile
        return _cached_build(p.dataset, p.num_train, p.num_val, p.num_test, max_len or p.max_len, p.seed, p.model,
                             None if self.data_path is None else str(self.data_path))

    def splits(self, data_seed=None) -> dict:
        built, pad = self.build(), self.model_config().pad_id
        return {"train": built.train, "val": sort_by_length(built.val, pad), "test": sort_by_length(built.test, pad)}

    def data_lineage(self, data_seed=None) -> dict:
        p = self.profile
        return {"dataset": p.dataset, "num_train": p.num_train, "num_val": p.num_val, "num_test": p.num_test,
                "max_len": p.max_len, "seed": p.seed, "tokenizer": p.model}

    # -- models ---------------------------------------------------------------------------------

    def model_config(self, gates: str | None = None) -> HFEncoderConfig:
        hf_config = _cached_hf_config(self.profile.model, self.build().info["num_classes"])
        return replace(hf_config, gates=gates)

    def build_model(self, model_config: HFEncoderConfig) -> GatedHFClassifier:
        hf, _ = load_classifier(model_config.model, num_labels=model_config.num_classes,
                                attn_implementation=model_config.attn_implementation)
        return GatedHFClassifier(hf, model_config)

    def selection(self, train_config):
        """Validation accuracy per epoch when there is more than one epoch to choose from."""
        if train_config.epochs == 1 and train_config.objective != "hard_adapt":
            return None  # one epoch: nothing to select, and a validation pass per budget saved (hard adaptation
            # still compares with the unadapted checkpoint)
        if train_config.objective == "recovery":
            val = self.splits()["val"]
            return lambda model: evaluate(model, val)["accuracy"]
        return super().selection(train_config)

    @property
    def source(self) -> str:
        """The encoder that was actually used, for the report."""
        return _cached_source(self.profile.model)

    # -- structural pruning, timing, post-hoc baseline -----------------------------------------

    def structural(self, model: GatedHFClassifier, budget: float):
        """The plain HF model with only the top-k heads at ``budget`` (per-layer floor), and its mask."""
        return pruned_copy(model, budget)

    def prune_and_check(self, model: GatedHFClassifier, budgets, check_examples: int = 16):
        """Structurally pruned models at ``budgets`` ({budget: model}), and whether every one gives the
        hard-masked gated model's logits on the first test examples."""
        ids = self.splits()[self.eval_split].tensors[0][:check_examples]
        pad = self.model_config().pad_id
        pruned, equal = {}, True
        for b in budgets:
            pruned[b], mask = self.structural(model, b)
            with torch.no_grad():
                masked = model(ids, mode="hard", head_mask=mask).logits
                cut = pruned[b](input_ids=ids, attention_mask=ids.ne(pad).long()).logits
            equal &= torch.allclose(masked, cut, atol=1e-4)
        return pruned, bool(equal)

    def describe(self) -> str:
        """Which model and data this study uses, for the top of a notebook."""
        p, info, cfg = self.profile, self.build().info, self.model_config()
        sizes = {name: len(split) for name, split in self.splits().items()}
        train = info["splits"]["train"]
        return "\n".join([
            f"model actually used: {self.source}",
            f"  {cfg.model_type}, {cfg.num_layers} layers x {cfg.num_heads} heads = {cfg.num_layers * cfg.num_heads} "
            f"heads, attention: {cfg.attn_implementation}",
            f"profile {p.name}, seed {p.seed}: data from {info['source']}",
            f"{sizes['train']} train / {sizes['val']} validation / {sizes['test']} test, "
            f"{info['num_classes']} classes, length {p.max_len} (mean {train['mean_tokens']} word pieces, "
            f"{100 * train['fills_max_len']:.0f}% truncated); latency at length {p.timing_len}",
        ])

    def evaluate_plain(self, hf_model, split: str | None = None) -> dict:
        """Accuracy of a plain (possibly pruned) HF classifier on ``split`` (default: the reporting split)."""
        wrapped = GatedHFClassifier(hf_model, replace(self.model_config(), gates=None))
        return evaluate(wrapped, self.splits()[split or self.eval_split])

    def timing_batches(self) -> list[torch.Tensor]:
        """Test examples tokenized at the timing length (the paper: 128), in batches."""
        p = self.profile
        ids = self.build(max_len=p.timing_len).test.tensors[0][: p.timing_examples]
        return list(ids.split(p.timing_batch_size))

    def latency(self, models: dict, baseline: str = "dense") -> pd.DataFrame:
        """Single-thread latency of plain HF models, each saved and reloaded first, timed side by side.

        The analytic limit is the FLOP ratio of eager-attention twins (FlopCounterMode cannot see
        inside the fused SDPA kernel the timed models use).
        """
        p = self.profile
        return reloaded_latency(models, self.timing_batches(), self.model_config().pad_id, warmup=p.timing_warmup,
                                repeats=p.timing_repeats, baseline=baseline)

    def head_importance(self, dense: GatedHFClassifier) -> torch.Tensor:
        """[L, H] validation-loss increase when each head alone is masked, on the first validation examples.

        Kept in the run cache as a measurement of the dense run (``Study.measured``): it takes one validation pass
        per head (72 for MiniLM), and every process that looks up a post-hoc model needs it first, since the
        recovered models' keys hold the heads it keeps."""
        val = self.splits()["val"]
        examples = min(self.profile.importance_examples, len(val))

        def measure():
            subset = torch.utils.data.Subset(val, range(examples))
            return {"scores": head_importance(dense, subset, batch_size=64).tolist()}

        scores = self.measured("head-importance", dense, {"examples": examples, "batch_size": 64}, measure)["scores"]
        return torch.tensor(scores, dtype=torch.float32)

    def posthoc_structural(self, dense: GatedHFClassifier, importance: torch.Tensor, budget: float):
        """Dense post-hoc structural pruning at ``budget``: (zero-shot pruned, recovered pruned, mask)."""
        mask = posthoc_mask(importance, budget, min_per_layer=1)
        zero_shot = copy.deepcopy(dense.hf)
        prune_heads(zero_shot, mask)
        recovered, _ = self.recovered(dense, importance, budget)
        tag_as(recovered.hf, recovered)  # the plain HF model is the trained run's: result rows name it
        return zero_shot.eval(), recovered.hf.eval(), mask

    def recovered(self, dense: GatedHFClassifier, importance: torch.Tensor, budget: float):
        """The dense model pruned post hoc at ``budget`` (the heads ``importance`` ranks first, at least one per
        layer) after one recovery epoch with dense-teacher distillation, through the run cache: (model, metrics)."""
        mask = posthoc_mask(importance, budget, min_per_layer=1)
        _, _, dense_lineage = self.dense()
        config = replace(self.profile.recovery, seed=self.default_seed)
        lineage = {"train": config, "parent": dense_lineage, "budget": budget,
                   "kept_heads": [row.nonzero().flatten().tolist() for row in mask]}

        def pruned_student():  # the dense weights, pruned: the structure is the lineage's kept heads
            pruned = copy.deepcopy(dense.hf)
            prune_heads(pruned, mask)
            return GatedHFClassifier(pruned, replace(dense.config, gates=None))

        fit = self.fitter(config, teacher=dense)
        student, metrics, _ = self.train_cached("recovered", pruned_student, fit, lineage, seed=config.seed)
        return student, metrics

    # -- result rows: what notebooks 03 and 04 measured, as the report's rows ---------------------

    def kept_fraction(self, model) -> float:
        """The fraction of the encoder's L x H heads a structurally pruned ``model`` keeps."""
        config = self.model_config()
        return float(kept_heads_table(model)["heads kept"].sum()) / (config.num_layers * config.num_heads)

    def budgeted_rows(self, *, dense, dense_test: dict, warm, hard, adapted: dict, soft_sweep: pd.DataFrame,
                      gate_spearman: float) -> list[dict]:
        """Rows of the dense model (``dense_test``: its ``evaluate``), the budgeted checkpoint (``warm``) soft and
        the hard-adapted one (``hard``) at each budget (``adapted``: {budget: {"soft": evaluate, "hard":
        evaluate}}), the soft sweep at every budget (the paper's Table 9 points among them) and the gate ranking's
        Spearman correlation. Each evaluation's per-example outcomes go with its row (the claims' paired intervals)."""
        M = self.methods
        return [self.result_row(M.dense, 1.0, dense_test, models=dense),
                *self.rows_of(M.hard_adapted, [stats["hard"] for stats in adapted.values()], models=hard),
                *self.rows_of(M.warm, [stats["soft"] for stats in adapted.values()], models=warm),
                *self.rows_of(M.soft_sweep, soft_sweep, models=warm),
                self.result_row(M.gate_ranking, None, {}, value=gate_spearman, models=warm)]

    def structural_rows(self, method, pruned: dict, stats: dict, latency: pd.DataFrame, models: dict,
                        label: str) -> list[dict]:
        """Rows of structurally pruned models (``pruned``: {budget: plain HF model}; ``stats``: {budget:
        ``evaluate_plain``}) of ``method``, each with its kept fraction of heads as cost, and the measured
        speed-up, analytic limit and per-repeat times of ``latency``'s entry ``label.format(budget=b)``;
        ``models``: {budget: the trained model each came from}."""
        return [self.timed_row(method, b, {**stats[b], "cost": self.kept_fraction(model)}, latency,
                               label.format(budget=b), models=models[b]) for b, model in pruned.items()]

    def static_rows(self, static_hard: dict, stats: dict) -> list[dict]:
        """Rows of the hard-adapted static specialists ({budget: model}; ``stats``: {budget: hard ``evaluate``})."""
        return [self.result_row(self.methods.static_hard, b, stats[b], models=model)
                for b, model in static_hard.items()]

    def posthoc_rows(self, dense, posthoc: dict, stats: dict, latency: pd.DataFrame) -> list[dict]:
        """Rows of the dense post-hoc structural baseline, zero-shot and recovered (``posthoc``: {budget:
        {"zero-shot": model, "recovered": model}}; ``stats`` the same shape of ``evaluate_plain`` results); the
        recovered models with their measured speed (``latency``'s "post-hoc recovered @b")."""
        M = self.methods
        recovered = {b: pair["recovered"] for b, pair in posthoc.items()}
        rows = [self.result_row(M.posthoc, b, {**stats[b]["zero-shot"], "cost": self.kept_fraction(pair["zero-shot"])},
                                models=dense) for b, pair in posthoc.items()]
        return rows + self.structural_rows(M.posthoc_recovered, recovered,
                                           {b: s["recovered"] for b, s in stats.items()}, latency, recovered,
                                           "post-hoc recovered @{budget:.2f}")


def kept_heads_table(model) -> pd.DataFrame:
    """Per layer: how many heads are kept and which (original indices)."""
    heads = kept_heads(model)
    return pd.DataFrame({"heads kept": [len(h) for h in heads], "which": [", ".join(map(str, h)) for h in heads]},
                        index=pd.Index(range(len(heads)), name="layer"))


@cache
def _cached_build(dataset, num_train, num_val, num_test, max_len, seed, model, path):
    tokenizer = PretrainedTokenizer(load_tokenizer(model), name=model)
    return build_text_classification(dataset, num_train=num_train, num_val=num_val, num_test=num_test,
                                     max_len=max_len, seed=seed, path=path, tokenizer=tokenizer)


@cache
def _cached_hf_config(model: str, num_classes: int) -> HFEncoderConfig:
    hf, _ = load_classifier(model, num_labels=num_classes)
    return GatedHFClassifier.from_hf(hf, model).config


@cache
def _cached_source(model: str) -> str:
    from bab.heads.hf_encoder import resolve_encoder_source

    return resolve_encoder_source(model).describe()
