"""Dynamic Context Pruning on your own decoder and text, in one object: :class:`ContextPruner`.

    pruner = ContextPruner.from_pretrained()             # the packaged SmolLM2 offline, a folder, a .gguf, a hub id,
                                                          # or a transformers model object (with tokenizer=)
    pruner.fit("my_corpus.txt", steps=200, gamma=0.1)     # fine-tune with the interaction modules (alpha 1 -> 8)
    pruner.evaluate("my_held_out.txt")                    # perplexity and fraction of context pruned, vs dense
    pruner.generate("It is a truth", max_new_tokens=20)   # model.generate() with a cache that drops tokens

It chains ``bab.context``: ``load_decoder`` with a ``PruningConfig``, ``train_lm`` (objective
``context_pruning``, or ``budget_context`` for a budget-conditioned model) through the run cache
(``OwnTextStudy``) and ``evaluate_lm`` (hard keep decisions). Text: a .txt file, a string, a list of
strings, or a ``datasets.Dataset`` with a text column; it becomes one token stream, cut into windows of ``context``
tokens.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

import bab.context
from bab.context.attach import attach
from bab.context.evaluate import evaluate_lm
from bab.context.interaction import PruningConfig
from bab.context.lm import check_length, settings
from bab.context.pretrained import load_decoder
from bab.context.pruned_cache import PrunedCache
from bab.context.recipe import fit_config
from bab.context.train import LMTrainConfig, train_lm
from bab.core.budget import validate_budget
from bab.core.digest import state_digest
from bab.core.runs import RunCache
from bab.core.step_clock import fit_plan
from bab.core.threads import apply_threads
from bab.experiments.study import Study, tensors_digest


def read_text(text, text_column: str = "text") -> str:
    """One string from a .txt path, a string, a list of strings or a ``datasets.Dataset`` (``text_column``)."""
    if isinstance(text, os.PathLike) or (isinstance(text, str) and text.endswith(".txt") and "\n" not in text):
        path = Path(text)
        if not path.is_file():
            raise FileNotFoundError(f"text file not found: {path}")
        text = path.read_text(encoding="utf-8")
    elif type(text).__name__ == "Dataset":
        if text_column not in text.column_names:
            raise ValueError(f"the Dataset has the columns {text.column_names} but no {text_column!r}; pass "
                             f"text_column=")
        text = "\n".join(text[text_column])
    elif isinstance(text, (list, tuple)):
        text = "\n".join(map(str, text))
    if not isinstance(text, str):
        raise TypeError(f"text must be a .txt path, a string, a list of strings or a datasets.Dataset, got "
                        f"{type(text).__name__}")
    if not text.strip():
        raise ValueError("the text is empty; give the decoder something to read")
    return text


class ContextPruner:
    """A pretrained decoder whose layers learn to drop context tokens (the KV cache shrinks as it decodes).

    Attributes: ``model`` (a transformers causal LM with context pruning attached: ``model.generate(ids,
    past_key_values=PrunedCache())`` decodes with a cache that drops tokens), ``tokenizer``, ``config`` (the
    LMTrainConfig of the last fit), ``history``.
    """

    def __init__(self, model, tokenizer, config: LMTrainConfig):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.history: list[dict] = []

    @classmethod
    def from_pretrained(cls, source=None, budget_conditioned: bool = False, r: int = 64, context: int = 128,
                        allow_hub: bool = True, tokenizer=None) -> ContextPruner:
        """A decoder with a fresh interaction attached to every layer (``bab.context.attach``).

        ``source``: where ``bab.context.pretrained.load_decoder`` finds one (None: the packaged SmolLM2, then the hub;
        a folder, a .gguf file, a hub id), or a transformers causal LM object you already have (GPT-2, Llama,
        Qwen2, Mistral, ...), which is used as it is, with its ``tokenizer``.
        ``budget_conditioned``: one checkpoint for every keep budget (``evaluate(..., budget=b)``).
        """
        pruning = PruningConfig(r=r, budget_conditioned=budget_conditioned)
        if isinstance(source, torch.nn.Module):
            if tokenizer is None:
                raise ValueError("a model object needs its tokenizer: ContextPruner.from_pretrained(model, "
                                 "tokenizer=AutoTokenizer.from_pretrained(...))")
            model = attach(source, pruning).eval()
        else:
            if tokenizer is not None:
                raise ValueError("tokenizer= goes with a model object; a source brings its own tokenizer")
            model, tokenizer = load_decoder(source, pruning=pruning, allow_hub=allow_hub)
        check_length(model, context)
        return cls(model, tokenizer, fit_config(context, budget_conditioned))  # the method's recipe

    def token_ids(self, text, text_column: str = "text") -> torch.Tensor:
        """The token stream [N] of ``text`` (see ``read_text``)."""
        ids = self.tokenizer(read_text(text, text_column))["input_ids"]
        if len(ids) <= self.config.context + 1:
            raise ValueError(f"the text has {len(ids)} tokens, too few for one window of {self.config.context} + 1; "
                             f"give more text or a shorter context=")
        return torch.tensor(ids, dtype=torch.long)

    def fit(self, text, steps: int = 200, progress: bool = True, text_column: str = "text", cache=None,
            threads: int | None = None, **overrides):
        """Fine-tune on ``text``; ``overrides`` change the LMTrainConfig (gamma=, lr=, batch_size=, seed= ...).

        gamma (the keep-mass weight) sets how much context is dropped: larger prunes more. The fit is a study step
        (``OwnTextStudy``, below) as the other methods' fits are: ``cache`` is where the fitted
        weights are kept (a ``bab.core.runs.RunCache`` or a folder; default the run cache, ``$BAB_CACHE_DIR``;
        ``False``: nowhere), keyed by the starting weights, the text and the config, so a fit that was killed
        continues where it stopped and a repeated one is loaded. ``threads``: torch threads (default
        ``$BAB_THREADS``, else torch's current setting; ``bab.core.threads``). With ``progress`` it prints how long
        the fit will take after its first few steps.
        """
        apply_threads(threads)
        self.config = replace(self.config, steps=steps, **overrides)
        study = OwnTextStudy(self.model, self.token_ids(text, text_column), self.config, cache=cache,
                             progress=progress)
        _, metrics = study.fine_tune()
        self.history = metrics["history"]
        return self

    def evaluate(self, text, budget: float | None = None, max_windows: int | None = None,
                 text_column: str = "text") -> dict:
        """Perplexity with hard drops, the fraction of context pruned, and the dense perplexity beside it."""
        if budget is not None:
            budget = validate_budget(budget)
        ids = self.token_ids(text, text_column)
        pruned = evaluate_lm(self.model, ids, self.config.context, budget=budget, max_windows=max_windows)
        dense = evaluate_lm(self.model, ids, self.config.context, prune=False, max_windows=max_windows)
        return {**pruned, "budget": budget, "dense_perplexity": dense["perplexity"]}

    @torch.no_grad()
    def generate(self, prompt: str, max_new_tokens: int = 32, budget: float | None = None, **generate_kwargs) -> str:
        """The greedy continuation of ``prompt`` (text) by ``model.generate`` with a ``PrunedCache``: the tokens the
        model drops leave the cache for good. ``generate_kwargs`` go to ``model.generate`` (e.g. do_sample=True)."""
        if budget is not None:
            budget = validate_budget(budget)
        ids = torch.tensor([self.tokenizer(prompt)["input_ids"]])
        check_length(self.model, ids.shape[1] + max_new_tokens)
        self.model.eval()
        with settings(self.model, budget=budget):
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=PrunedCache(),
                                      max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id or 0, **generate_kwargs)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    def __repr__(self) -> str:
        return f"ContextPruner({type(self.model).__name__}, objective={self.config.objective!r})"


class OwnTextStudy(Study):
    """The study ``ContextPruner.fit`` runs: one fine-tune (``train_lm``) through the run cache, keyed by the starting
    weights' digest, the token stream's and the training config, so an interrupted fit resumes and a repeated one
    loads. ``model``: a causal LM with context pruning attached (fine-tuned in place); ``ids``: the token stream [N]."""

    experiment = "own_text"
    method = "context"
    method_code = bab.context

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, config: LMTrainConfig,
                 cache: RunCache | None = None, progress: bool = True):
        super().__init__(config, cache, progress)
        self.model, self.ids, self.config = model, ids, config

    def data_lineage(self) -> dict:
        return {"text": tensors_digest(TensorDataset(self.ids))}

    def fine_tune(self) -> tuple[torch.nn.Module, dict]:
        """The fine-tuned model (``self.model``, trained or loaded in place) and the run's metrics (``history`` the
        training loop's rows)."""
        lineage = {"weights": state_digest(self.model), "class": type(self.model).__name__, "train": self.config}

        def fit(model, checkpoint):
            with fit_plan("fit", [(self.config.objective, self.config.steps)], self.progress):
                result = train_lm(model, self.ids, self.config, progress=self.progress, checkpoint=checkpoint)
            return {"history": result.history}

        model, metrics, _ = self.train_cached("fit", self.model, fit, lineage, seed=self.config.seed)
        return model, metrics
