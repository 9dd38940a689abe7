"""A user's labelled texts, whatever they come in: a CSV path, a pandas DataFrame, a ``datasets`` object.

Everything becomes a :class:`LabeledTexts` (texts, raw labels as the source wrote them), and one
:class:`LabelMap`, fitted on the training data (or given as ``labels=``), turns raw labels into ids for
every split, so train, validation and test can never be numbered differently. A label the map does not
know raises, naming it and the known ones.

CSV files are read by ``bab.data.text.read_labeled_csv`` (header row, malformed rows reported with their
line); DataFrames and ``datasets.Dataset`` are checked the same way (columns present, no empty text). A
``datasets.ClassLabel`` column gives its names, so a hub data set keeps its label names.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from bab.data.text import read_labeled_csv, sort_by_length


@dataclass(frozen=True)
class LabeledTexts:
    """Texts [N] with their raw labels [N] (str or int, as in the source) and where they came from."""

    texts: list[str]
    labels: list
    source: str


def read_labeled(data, text_column: str = "text", label_column: str = "label", split: str = "train",
                 skip_malformed: bool = False) -> LabeledTexts:
    """Texts and raw labels from a CSV path, a DataFrame, a ``datasets.Dataset`` or ``DatasetDict``
    (its ``split``), or a ``(texts, labels)`` pair."""
    if isinstance(data, LabeledTexts):
        return data
    if isinstance(data, (str, os.PathLike)):
        return _read_csv(Path(data), text_column, label_column, skip_malformed)
    if isinstance(data, tuple) and len(data) == 2:
        return _checked(list(data[0]), list(data[1]), "texts and labels", text_column)
    kind = type(data).__module__.split(".")[0] + "." + type(data).__name__
    if kind == "datasets.DatasetDict":
        if split not in data:
            raise ValueError(f"the DatasetDict has splits {list(data)}, not {split!r}; pass the split to use "
                             f"(e.g. data['train']) or name it {split!r}")
        data = data[split]
        kind = "datasets.Dataset"
    if kind == "datasets.Dataset":
        return _read_dataset(data, text_column, label_column)
    if kind == "pandas.DataFrame":
        return _read_frame(data, text_column, label_column, "DataFrame")
    raise TypeError(f"data must be a CSV path, a pandas DataFrame, a datasets.Dataset / DatasetDict or a "
                    f"(texts, labels) pair, got {type(data).__name__}")


def _read_csv(path: Path, text_column, label_column, skip_malformed) -> LabeledTexts:
    _check_header(path, text_column, label_column)
    try:
        read = read_labeled_csv(path, text_column=text_column, label_column=label_column,
                                skip_malformed=skip_malformed)
    except ValueError as error:  # the reader's advice names its argument; say the command line's too
        if "skip_malformed=True" in str(error):
            raise ValueError(f"{error} (command line: --skip-malformed)") from None
        raise
    names = read.report["label_names"]  # None: the file's labels were integers, kept as ids
    labels = read.labels if names is None else [names[i] for i in read.labels]
    return LabeledTexts(read.texts, labels, str(path))


def _check_header(path: Path, text_column, label_column) -> None:
    """The header names both columns (the reader says so too; here the advice names both ways to fix it)."""
    import csv

    if not path.is_file():
        return  # the reader's "CSV file not found"
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
        header = next(csv.reader(handle), None)
    if header:
        _missing_columns([name.strip() for name in header], text_column, label_column, str(path))


def _missing_columns(columns, text_column, label_column, what: str) -> None:
    missing = [c for c in (text_column, label_column) if c not in columns]
    if missing:
        raise ValueError(f"{what} has the columns {list(columns)} but lacks {missing}; name the text and label "
                         f"columns with text_column= / label_column= (command line: --text-column / --label-column)")


def _read_frame(frame, text_column, label_column, what: str) -> LabeledTexts:
    _missing_columns(frame.columns, text_column, label_column, what)
    labels = frame[label_column].tolist()
    empty = [i for i, label in enumerate(labels) if label is None or label != label or str(label).strip() == ""]
    if empty:
        raise ValueError(f"{what}: the label column {label_column!r} is empty in rows {empty[:5]}"
                         f"{' ...' if len(empty) > 5 else ''}; fill or drop those rows")
    return _checked(frame[text_column].tolist(), labels, what, text_column)


def _read_dataset(dataset, text_column, label_column) -> LabeledTexts:
    _missing_columns(dataset.column_names, text_column, label_column, "the Dataset")
    feature = dataset.features[label_column]
    labels = dataset[label_column]
    if type(feature).__name__ == "ClassLabel":  # ids with names: keep the names
        labels = [feature.names[i] for i in labels]
    return _checked(list(dataset[text_column]), list(labels), "the Dataset", text_column)


def _checked(texts: list, labels: list, what: str, text_column: str) -> LabeledTexts:
    if len(texts) != len(labels):
        raise ValueError(f"{what}: {len(texts)} texts but {len(labels)} labels")
    if not texts:
        raise ValueError(f"{what} has no rows; give at least one labelled text per class")
    empty = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if empty:
        raise ValueError(f"{what}: the text column {text_column!r} is empty (or not text) in rows {empty[:5]}"
                         f"{' ...' if len(empty) > 5 else ''}; fill or drop those rows")
    return LabeledTexts([t.strip() for t in texts], labels, what)


class LabelMap:
    """Label names in id order, and raw labels -> ids.

    Labels are matched by their string form (``1`` and ``"1"`` are one label). An integer that is no
    name is taken as a position in the names (``labels=["neg", "pos"]`` with 0/1 in the data).
    """

    def __init__(self, names: Sequence):
        names = [str(n) for n in names]
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"labels must name at least two distinct classes, got {shorten(names)}")
        self.names = names
        self._index = {n: i for i, n in enumerate(names)}

    @classmethod
    def fit(cls, labels: Sequence, what: str = "the training data") -> LabelMap:
        """Names from training labels: integers in numeric order, anything else sorted as text."""
        distinct = set(labels)
        if len(distinct) < 2:
            raise ValueError(f"{what} has one class only ({next(iter(distinct))!r}); a classifier needs at least "
                             f"two. Check the label column")
        if all(isinstance(v, int) for v in distinct):
            return cls([str(v) for v in sorted(distinct)])
        return cls(sorted(str(v) for v in distinct))

    def ids(self, labels: Sequence, what: str = "the data") -> list[int]:
        out, unknown = [], []
        for v in labels:
            i = self._index.get(str(v))
            if i is None and isinstance(v, int) and 0 <= v < len(self.names):
                i = v
            if i is None:
                unknown.append(v)
            out.append(i)
        if unknown:
            seen = sorted({str(v) for v in unknown})
            raise ValueError(f"{what} has label(s) {seen[:10]} that the training labels ({shorten(self.names)}) do not "
                             f"include; a model cannot predict a class it was not trained on. Fix the labels, or "
                             f"drop those rows")
        return out


def encode(texts: LabeledTexts, label_map: LabelMap, tokenizer, max_len: int, what: str = "the data",
           by_length: bool = False) -> TensorDataset:
    """(input_ids [N, max_len] right-padded, labels [N]) for ``bab.heads.train`` / ``evaluate``;
    ``by_length``: longest first, which speeds up evaluation and leaves accuracy unchanged. Texts longer than
    ``max_len`` tokens are cut there, and a warning says how many (``TruncationWarning``)."""
    truncated = tokenizer.count_truncated(texts.texts, max_len) if hasattr(tokenizer, "count_truncated") else 0
    if truncated:
        warnings.warn(f"{truncated:,} of {len(texts.texts):,} texts in {what} truncated to {max_len} tokens (the "
                      f"model reads no further; a larger max_len keeps more, at a quadratic cost in attention)",
                      TruncationWarning, stacklevel=2)
    ids = tokenizer.encode(texts.texts, max_len)
    dataset = TensorDataset(ids, torch.tensor(label_map.ids(texts.labels, what), dtype=torch.long))
    return sort_by_length(dataset, tokenizer.pad_id) if by_length else dataset


class TruncationWarning(UserWarning):
    """Texts were longer than the model length and were cut."""


class FewExamplesWarning(UserWarning):
    """A class has too few training texts for its accuracy to mean much."""


# fewer training texts than this in a class: a warning (a fine-tune learns little of a class from a handful)
MIN_TEXTS_PER_CLASS = 20


def warn_if_few(texts: LabeledTexts, label_map: LabelMap, what: str = "the training data") -> None:
    """A ``FewExamplesWarning`` naming the classes of ``texts`` with fewer than ``MIN_TEXTS_PER_CLASS`` texts."""
    counts = Counter(label_map.ids(texts.labels, what))
    few = [(label_map.names[i], counts.get(i, 0)) for i in range(len(label_map.names))
           if counts.get(i, 0) < MIN_TEXTS_PER_CLASS]
    if few:
        listed = shorten([f"{name!r}: {n}" for name, n in few])
        warnings.warn(f"{what}: {len(few)} class(es) with fewer than {MIN_TEXTS_PER_CLASS} texts ({listed}); "
                      f"expect an accuracy that says little about them", FewExamplesWarning, stacklevel=2)


def shorten(items: Sequence, first: int = 8) -> str:
    """The items as text, the first ``first`` of a long list and how many more: a message stays one line."""
    items = [str(i) for i in items]
    if len(items) <= first:
        return ", ".join(items)
    return ", ".join(items[:first]) + f", ... ({len(items) - first} more, {len(items)} in all)"


def holdout(texts: LabeledTexts, fraction: float, seed: int) -> tuple[LabeledTexts, LabeledTexts]:
    """(train, validation): a stratified, seeded ``fraction`` of ``texts`` held out for checkpoint selection."""
    from bab.data.text import make_splits

    label_map = LabelMap.fit(texts.labels)
    ids = label_map.ids(texts.labels)
    num_val = max(len(label_map.names), round(fraction * len(ids)))
    splits = make_splits(texts.texts, ids, [], [], len(ids) - num_val, num_val, 0, seed)

    def take(split):
        return LabeledTexts(split.texts, [texts.labels[i] for i in split.indices], texts.source)

    return take(splits["train"]), take(splits["val"])
