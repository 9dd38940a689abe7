"""Dynamic Context Pruning on your own decoder and text, in one object: :class:`ContextPruner`.

    pruner = ContextPruner.from_pretrained()             # the packaged SmolLM2 offline, a folder, a .gguf, a hub id
    pruner.fit("my_corpus.txt", steps=200, gamma=0.1)     # fine-tune with the interaction modules (alpha 1 -> 8)
    pruner.evaluate("my_held_out.txt")                    # perplexity and fraction of context pruned, vs dense

It chains ``bab.context``: ``load_decoder`` with a ``PruningConfig``, ``train_lm`` (objective
``context_pruning``, or ``budget_context`` for a budget-conditioned model) and ``evaluate_lm`` (hard keep
decisions). Text: a .txt file, a string, a list of strings, or a ``datasets.Dataset`` with a text column;
it becomes one token stream, cut into windows of ``context`` tokens.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from bab.context.evaluate import evaluate_lm
from bab.context.interaction import PruningConfig
from bab.context.pretrained import load_decoder
from bab.context.train import LMTrainConfig, train_lm
from bab.core.budget import validate_budget
from bab.core.runs import RunCache, state_digest
from bab.core.step_clock import fit_plan
from bab.core.threads import apply_threads
from bab.experiments.study import tensors_digest


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

    Attributes: ``model`` (bab.context.llama.LlamaLM or gpt2.GPT2LM), ``tokenizer``, ``config``
    (the LMTrainConfig of the last fit), ``history``.
    """

    def __init__(self, model, tokenizer, config: LMTrainConfig):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.history: list[dict] = []

    @classmethod
    def from_pretrained(cls, source=None, budget_conditioned: bool = False, r: int = 64, context: int = 128,
                        allow_hub: bool = True) -> ContextPruner:
        """Load a decoder (``bab.context.pretrained.load_decoder``) and give every layer a fresh interaction.

        ``budget_conditioned``: one checkpoint for every keep budget (``evaluate(..., budget=b)``).
        """
        pruning = PruningConfig(r=r, budget_conditioned=budget_conditioned)
        model, tokenizer = load_decoder(source, pruning=pruning, allow_hub=allow_hub)
        model.check_length(context)
        objective = "budget_context" if budget_conditioned else "context_pruning"
        # a pretrained decoder takes small steps, the fresh interaction modules big ones (notebook 07's split)
        config = LMTrainConfig(objective=objective, context=context, batch_size=8, lr=1e-4, pruning_lr=1e-2,
                               gamma=0.0 if budget_conditioned else 0.1, budget_min=0.05, budget_max=0.8,
                               lambda_viol=50.0)
        return cls(model, tokenizer, config)

    def token_ids(self, text, text_column: str = "text") -> torch.Tensor:
        """The token stream [N] of ``text`` (see ``read_text``)."""
        ids = self.tokenizer(read_text(text, text_column))["input_ids"]
        if len(ids) <= self.config.context + 1:
            raise ValueError(f"the text has {len(ids)} tokens, too few for one window of {self.config.context} + 1; "
                             f"give more text or a shorter context=")
        return torch.tensor(ids, dtype=torch.long)

    def fit(self, text, steps: int = 200, progress: bool = True, text_column: str = "text", resume: bool = True,
            threads: int | None = None, **overrides):
        """Fine-tune on ``text``; ``overrides`` change the LMTrainConfig (gamma=, lr=, batch_size=, seed= ...).

        gamma (the keep-mass weight) sets how much context is dropped: larger prunes more. With ``resume`` the
        run keeps a resumable checkpoint in the run cache's partial area, keyed by the starting weights, the
        text and the config: a fit that was killed continues where it stopped when called again the same way.
        ``threads``: torch threads (default ``$BAB_THREADS``, else torch's current setting; ``bab.core.threads``).
        With ``progress`` it prints how long the fit will take after its first few steps.
        """
        apply_threads(threads)
        self.config = replace(self.config, steps=steps, **overrides)
        ids = self.token_ids(text, text_column)
        checkpoint = None
        if resume:
            key = {"weights": state_digest(self.model), "text": tensors_digest(TensorDataset(ids)),
                   "train": self.config.to_dict()}
            checkpoint = RunCache().checkpointer("context_pruner", key)
        with fit_plan("fit", [(self.config.objective, self.config.steps)], progress):
            result = train_lm(self.model, ids, self.config, progress=progress, checkpoint=checkpoint)
        if checkpoint is not None:
            checkpoint.clear()
        self.history = result.history
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

    def __repr__(self) -> str:
        return f"ContextPruner({type(self.model).__name__}, objective={self.config.objective!r})"
