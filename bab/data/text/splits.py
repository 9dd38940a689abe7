"""Stratified, seeded train / validation / test splits (the paper's 10,000 / 2,000 / 2,000).

Train and validation come from the training file (disjoint), test from the test file; every draw is
stratified by class, deterministically for a seed. Also used for Fashion-MNIST (``bab.data.images``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

PAPER_SPLIT_SIZES = (10_000, 2_000, 2_000)  # train / validation / test, as in the paper


class Split(NamedTuple):
    texts: list[str]
    labels: list[int]
    indices: list[int]  # row positions in the file the split was drawn from (0-based, after skipped rows)


def _quotas(counts: np.ndarray, n: int) -> np.ndarray:
    """``n`` spread over classes in proportion to ``counts`` (largest remainders; never above a class count)."""
    total = counts.sum()
    exact = counts * n / total if total else np.zeros_like(counts, dtype=float)
    quotas = np.floor(exact).astype(int)
    remainder = n - quotas.sum()
    if remainder:
        order = sorted(range(len(counts)), key=lambda k: (-(exact[k] - quotas[k]), k))
        for k in order:
            if remainder == 0:
                break
            if quotas[k] < counts[k]:
                quotas[k] += 1
                remainder -= 1
    return quotas


def _check_split_inputs(texts, labels, what: str) -> np.ndarray:
    if len(texts) != len(labels):
        raise ValueError(f"{what}: {len(texts)} texts but {len(labels)} labels")
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError(f"{what}: labels must be 0-based class ids, found {labels.min()}")
    return labels


def make_splits(train_texts: Sequence[str], train_labels: Sequence[int], test_texts: Sequence[str],
                test_labels: Sequence[int], num_train: int, num_val: int, num_test: int, seed: int) -> dict[str, Split]:
    """Train and validation sets from the training file (disjoint), a test set from the test file.

    Every draw is stratified: each class gets its share of the requested size in proportion to its share
    of the file (largest-remainder rounding; the validation quotas are taken from what training left).
    Rows within a class are chosen by a numpy Generator seeded from ``seed``, and each split is shuffled,
    so the same seed gives the same splits anywhere. The test draw uses its own generator, so it does
    not change when the training sizes do.
    """
    if num_train < 1 or num_val < 0 or num_test < 0:
        raise ValueError(f"need num_train >= 1 and num_val, num_test >= 0, got {num_train}/{num_val}/{num_test}")
    train_y = _check_split_inputs(train_texts, train_labels, "training file")
    test_y = _check_split_inputs(test_texts, test_labels, "test file")
    if num_train + num_val > len(train_y):
        raise ValueError(f"num_train + num_val = {num_train} + {num_val} = {num_train + num_val} exceeds the "
                         f"{len(train_y)} rows available in the training file; request at most {len(train_y)} in all.")
    if num_test > len(test_y):
        raise ValueError(f"num_test = {num_test} exceeds the {len(test_y)} rows available in the test file.")
    num_classes = int(max(train_y.max(initial=-1), test_y.max(initial=-1))) + 1
    train_seq, test_seq = np.random.SeedSequence(seed).spawn(2)

    rng = np.random.default_rng(train_seq)
    counts = np.bincount(train_y, minlength=num_classes)
    q_train = _quotas(counts, num_train)
    q_val = _quotas(counts - q_train, num_val)
    train_idx, val_idx = [], []
    for k in range(num_classes):
        rows = rng.permutation(np.flatnonzero(train_y == k))
        train_idx.append(rows[:q_train[k]])
        val_idx.append(rows[q_train[k]:q_train[k] + q_val[k]])
    train_idx = rng.permutation(np.concatenate(train_idx))
    val_idx = rng.permutation(np.concatenate(val_idx))

    rng = np.random.default_rng(test_seq)
    q_test = _quotas(np.bincount(test_y, minlength=num_classes), num_test)
    test_idx = [rng.permutation(np.flatnonzero(test_y == k))[:q_test[k]] for k in range(num_classes)]
    test_idx = rng.permutation(np.concatenate(test_idx))

    def take(texts, labels, idx) -> Split:
        idx = [int(i) for i in idx]
        return Split([texts[i] for i in idx], [int(labels[i]) for i in idx], idx)

    return {"train": take(train_texts, train_y, train_idx), "val": take(train_texts, train_y, val_idx),
            "test": take(test_texts, test_y, test_idx)}

