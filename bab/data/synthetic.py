"""The synthetic marked-token task (budgeted-attention paper, section 5 and 6.1).

Each sequence holds two markers at random positions; the label says whether the value tokens
that follow the two markers are equal. Solving it needs sparse evidence from two far-apart
positions, which is what attention heads are for.

Token ids: 0 = [PAD] (unused, kept so pad_id means the same everywhere), 1 = [CLS],
2 = [MARK], 3 .. 3 + num_values - 1 = values, then ``num_filler`` filler tokens. Position 0 is
always [CLS]. The positions that are neither markers nor marked values hold filler tokens, or
(``num_filler=0``) random values, which makes the task much harder: the model must then find
the values by their position after a marker instead of by what they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import TensorDataset

PAD, CLS, MARK = 0, 1, 2
FIRST_VALUE = 3


@dataclass(frozen=True)
class SyntheticConfig:
    seq_len: int = 64  # including [CLS]
    num_values: int = 8
    num_filler: int = 8  # 0: the background is random values (distractors)
    num_train: int = 8192
    num_val: int = 2048
    seed: int = 0  # the data seed

    def __post_init__(self):
        if self.seq_len < 6:
            raise ValueError(f"SyntheticConfig.seq_len must be at least 6 (CLS + two marker pairs), got {self.seq_len}")
        if self.num_filler < 0:
            raise ValueError(f"SyntheticConfig.num_filler must be >= 0, got {self.num_filler}")
        if self.num_values < 2:
            raise ValueError(f"SyntheticConfig.num_values must be at least 2, got {self.num_values}")
        if self.num_train < 1 or self.num_val < 1:
            raise ValueError(f"need at least one train and one validation example, got {self.num_train}/{self.num_val}")

    @property
    def vocab_size(self) -> int:
        return FIRST_VALUE + self.num_values + self.num_filler


def make_marked_token_examples(n: int, config: SyntheticConfig, generator: torch.Generator):
    """Returns (input_ids [n, seq_len] long, labels [n] long). Classes are balanced in expectation."""
    T = config.seq_len
    if config.num_filler:
        first_filler = FIRST_VALUE + config.num_values
        ids = torch.randint(first_filler, first_filler + config.num_filler, (n, T), generator=generator)
    else:
        ids = torch.randint(FIRST_VALUE, FIRST_VALUE + config.num_values, (n, T), generator=generator)
    ids[:, 0] = CLS
    # first marker in [1, T-4], second at least two later so the first marker's value is not a marker
    first = torch.randint(1, T - 3, (n,), generator=generator)
    gap = (torch.rand(n, generator=generator) * (T - 2 - first - 1)).long() + 2  # second in [first+2, T-2]
    second = first + gap
    rows = torch.arange(n)
    ids[rows, first] = MARK
    ids[rows, second] = MARK
    labels = torch.randint(0, 2, (n,), generator=generator)
    # positive examples copy the first value to the second; negatives get a different value
    v1 = torch.randint(FIRST_VALUE, FIRST_VALUE + config.num_values, (n,), generator=generator)
    ids[rows, first + 1] = v1
    shift = torch.randint(1, config.num_values, (n,), generator=generator)
    other = (v1 - FIRST_VALUE + shift) % config.num_values + FIRST_VALUE
    ids[rows, second + 1] = torch.where(labels.bool(), v1, other)
    return ids, labels


def build_synthetic(config: SyntheticConfig) -> tuple[TensorDataset, TensorDataset]:
    """Deterministic train and validation sets for ``config`` (same seed, same data, anywhere)."""
    generator = torch.Generator().manual_seed(config.seed)
    train = make_marked_token_examples(config.num_train, config, generator)
    val = make_marked_token_examples(config.num_val, config, generator)
    return TensorDataset(*train), TensorDataset(*val)


def describe_example(input_ids: torch.Tensor, label, config: SyntheticConfig) -> str:
    """One sequence as text: markers as '^', marked values in brackets, filler as '.'."""
    names = {PAD: "_", CLS: "C", MARK: "^"}
    tokens, after_mark = [], False
    for token in input_ids.tolist():
        if token in names:
            text = names[token]
        elif token < FIRST_VALUE + config.num_values:
            text = f"[{token - FIRST_VALUE}]" if after_mark else str(token - FIRST_VALUE)
        else:
            text = "."
        after_mark = token == MARK
        tokens.append(text)
    return f"label {int(label)}: " + "".join(tokens)
