"""Text classification data: AG News and DBpedia14 (budgeted-attention paper, section 6.2).

Where the data comes from (see DESIGN.md, "Sources of data and models"): an explicit folder, then
``$BAB_DATA_DIR/<name>``, then the Hugging Face hub for users who are online. Local folders hold the
original CSV files (no header; class id 1-based, title, body), which are read with the ``csv`` module
rather than pandas so that quoting, embedded newlines and malformed rows are handled explicitly and
reported with the line they start on.

The paper draws 10,000 training / 2,000 validation examples from the training file and 2,000 test
examples from the test file, stratified by class; ``make_splits`` does exactly that, deterministically
for a seed. Texts are tokenised into words with a vocabulary fitted on the training split only, so no
information about validation or test texts leaks into the model's input space.
"""

from __future__ import annotations

import csv
import html
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import TensorDataset

PAD, CLS, UNK = 0, 1, 2
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[UNK]")
PAPER_SPLIT_SIZES = (10_000, 2_000, 2_000)  # train / validation / test, as in the paper


@dataclass(frozen=True)
class TextSource:
    """What the loader needs to know about one named data set."""

    hub_id: str
    num_classes: int
    class_names: tuple[str, ...]
    hub_text_columns: tuple[str, ...]  # joined with a space, like title + " " + body in the CSV files


SOURCES = {
    "ag_news": TextSource("ag_news", 4, ("World", "Sports", "Business", "Sci/Tech"), ("text",)),
    "dbpedia_14": TextSource(
        "fancyzhx/dbpedia_14", 14,
        ("Company", "EducationalInstitution", "Artist", "Athlete", "OfficeHolder", "MeanOfTransportation", "Building",
         "NaturalPlace", "Village", "Animal", "Plant", "Album", "Film", "WrittenWork"),
        ("title", "content")),
}


class LabeledTexts(NamedTuple):
    """Texts with 0-based integer labels; ``report`` says how many rows were read and skipped, and why."""

    texts: list[str]
    labels: list[int]
    report: dict


class Split(NamedTuple):
    texts: list[str]
    labels: list[int]
    indices: list[int]  # row positions in the file the split was drawn from (0-based, after skipped rows)


@dataclass
class TextData:
    """Raw (untokenised) training and test files of one data set, and where they came from."""

    name: str
    train: LabeledTexts
    test: LabeledTexts
    class_names: list[str]
    source: str  # a folder, or "hub:<id>"
    num_classes: int = field(init=False)

    def __post_init__(self):
        self.num_classes = len(self.class_names)


# ----------------------------------------------------------------------------------------------------------------
# Text cleanup


_BARE_ENTITY = re.compile(r"\s?(?<![&\w])(#\d{2,4}|quot|amp|lt|gt|apos|nbsp);")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]{0,500}>")
_WHITESPACE = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Undo the escaping artefacts of AG News, leaving ordinary text unchanged.

    AG News replaced the ampersand of HTML entities by a space (``Saturday #39;s``, ``AT amp;T``,
    ``Johnson  amp; Johnson``, `` #36;160``), keeps escaped HTML (``&lt;b&gt;``) and has backslashes
    where the source had line breaks (``heat\\waves``). These would otherwise become tokens like ``39``
    or ``quot`` that carry no meaning but are frequent enough to enter the vocabulary. Here: backslashes
    become spaces, a bare entity and the one space before it become the entity again, HTML entities are
    decoded (cp1252 codes such as ``#146;`` included), HTML tags are removed and whitespace collapsed.
    """
    text = text.replace("\\", " ")
    text = _BARE_ENTITY.sub(r"&\1;", text)
    for _ in range(2):  # "&amp;lt;" is escaped twice
        if "&" not in text:
            break
        text = html.unescape(text)
    text = _HTML_TAG.sub(" ", text)
    return _WHITESPACE.sub(" ", text).strip()


# ----------------------------------------------------------------------------------------------------------------
# CSV reading


class _Malformed(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _csv_records(path: Path):
    """Yields (first physical line of the record, fields); blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            line = 0
            while True:
                start = line + 1
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as error:
                    raise ValueError(f"{path}, line {start}: the CSV parser failed ({error}). Fix the quoting of "
                                     f"this record (fields with commas, quotes or newlines must be quoted, "
                                     f"internal quotes doubled).") from error
                line = reader.line_num
                if row and any(cell.strip() for cell in row):
                    yield start, row
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}); re-save it as UTF-8.") from error


class _RowCollector:
    """Applies the skip_malformed policy and builds the report."""

    def __init__(self, path: Path, skip_malformed: bool):
        self.path, self.skip = Path(path), skip_malformed
        self.rows, self.reasons, self.examples = 0, Counter(), []

    def malformed(self, line: int, error: _Malformed):
        if not self.skip:
            raise ValueError(f"{self.path}, line {line}: {error} Fix or remove the row, or pass skip_malformed=True "
                             f"to skip malformed rows (the returned report counts them).")
        self.reasons[error.reason] += 1
        if len(self.examples) < 5:
            self.examples.append(f"line {line}: {error}")

    def report(self, kept: int, **extra) -> dict:
        if self.rows == 0:
            raise ValueError(f"{self.path} is empty (no records); expected a CSV file with one example per row.")
        if kept == 0:
            raise ValueError(f"{self.path}: all {self.rows} rows are malformed and were skipped; first problems: "
                             + "; ".join(self.examples))
        return {"path": str(self.path), "rows": self.rows, "kept": kept, "skipped": self.rows - kept,
                "reasons": dict(self.reasons), "examples": list(self.examples), **extra}


def _join_text(parts: Sequence[str]) -> str:
    return " ".join(part.strip() for part in parts if part.strip())


def read_original_csv(path, num_classes: int | None = None, skip_malformed: bool = False) -> LabeledTexts:
    """Reads the original AG News / DBpedia14 format: no header; class id (1-based), title, body.

    The text is ``title + " " + body`` (stripped; the title may be empty) and kept raw: cleanup is the
    tokenizer's job, so that what is read equals what is in the file. Labels are returned 0-based. With
    ``num_classes`` the class id must lie in 1..num_classes. A malformed row (not 3 columns, class not an
    integer or out of range, empty text) raises a ValueError naming the file and the line the record
    starts on, unless ``skip_malformed`` is set, in which case the report counts the skipped rows by reason.
    """
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")
    collector = _RowCollector(path, skip_malformed)
    texts, labels = [], []
    for line, row in _csv_records(path):
        collector.rows += 1
        try:
            if len(row) != 3:
                hint = ""
                if collector.rows == 1 and not row[0].strip().lstrip("-").isdigit():
                    hint = " This looks like a header row: for CSV files with a header use read_labeled_csv."
                raise _Malformed("wrong column count",
                                 f"expected 3 columns (class, title, body), found {len(row)}.{hint}")
            try:
                class_id = int(row[0].strip())
            except ValueError:
                hint = " (a header row? use read_labeled_csv for files with a header)" if collector.rows == 1 else ""
                raise _Malformed("class not an integer",
                                 f"the class {row[0]!r} is not an integer{hint}.") from None
            if class_id < 1 or (num_classes is not None and class_id > num_classes):
                allowed = f"1..{num_classes}" if num_classes is not None else ">= 1"
                raise _Malformed("class out of range", f"class {class_id} is outside {allowed} (ids are 1-based).")
            text = _join_text(row[1:])
            if not text:
                raise _Malformed("empty text", "title and body are both empty.")
        except _Malformed as error:
            collector.malformed(line, error)
            continue
        texts.append(text)
        labels.append(class_id - 1)
    return LabeledTexts(texts, labels, collector.report(len(texts)))


def read_labeled_csv(path, text_column: str | Sequence[str] = "text", label_column: str = "label",
                     label_names: Sequence[str] | None = None, num_classes: int | None = None,
                     skip_malformed: bool = False) -> LabeledTexts:
    """Reads any CSV file with a header row, e.g. ``text,label``.

    ``text_column`` may name several columns (joined with a space). Labels are mapped to 0-based ids:
    with ``label_names`` by their position in that list (use this to give train and test files the same
    mapping); otherwise integer labels are used as they are (they must be 0-based; with ``num_classes``
    below it) and other labels are numbered in sorted order. ``report["label_names"]`` gives the mapping
    used (None for integer labels). Malformed rows are handled as in ``read_original_csv``.
    """
    text_columns = [text_column] if isinstance(text_column, str) else list(text_column)
    collector = _RowCollector(path, skip_malformed)
    records = _csv_records(path)
    first = next(records, None)
    if first is None:
        raise ValueError(f"{path} is empty (no header row); expected a CSV file whose first row names the columns.")
    header = [name.strip() for name in first[1]]
    missing = [name for name in [*text_columns, label_column] if name not in header]
    if missing:
        raise ValueError(f"{path}: the header {header} lacks the column(s) {missing}; pass text_column= and "
                         f"label_column= naming existing columns (or use read_original_csv for files without header).")
    text_idx = [header.index(name) for name in text_columns]
    label_idx = header.index(label_column)
    raw = []  # (line, text, label string)
    for line, row in records:
        collector.rows += 1
        try:
            if len(row) != len(header):
                raise _Malformed("wrong column count", f"expected {len(header)} columns like the header, found "
                                                       f"{len(row)}.")
            text = _join_text([row[i] for i in text_idx])
            label = row[label_idx].strip()
            if not label:
                raise _Malformed("empty label", f"the label column {label_column!r} is empty.")
            if not text:
                raise _Malformed("empty text", f"the text column(s) {text_columns} are empty.")
        except _Malformed as error:
            collector.malformed(line, error)
            continue
        raw.append((line, text, label))

    names = list(label_names) if label_names is not None else None
    integer_labels = names is None and raw and all(re.fullmatch(r"-?\d+", label) for _, _, label in raw)
    if names is None and not integer_labels:
        names = sorted({label for _, _, label in raw})
    index = {name: i for i, name in enumerate(names)} if names is not None else {}
    texts, labels = [], []
    for line, text, label in raw:
        try:
            if integer_labels:
                value = int(label)
                if value < 0 or (num_classes is not None and value >= num_classes):
                    allowed = f"0..{num_classes - 1}" if num_classes is not None else ">= 0"
                    raise _Malformed("label out of range", f"label {value} is outside {allowed} (integer labels "
                                                           f"are taken as 0-based ids).")
            else:
                if label not in index:
                    raise _Malformed("unknown label", f"label {label!r} is not one of label_names {names}.")
                value = index[label]
        except _Malformed as error:
            collector.malformed(line, error)
            continue
        texts.append(text)
        labels.append(value)
    return LabeledTexts(texts, labels, collector.report(len(texts), label_names=names))


def read_classification_csv(path, num_classes: int | None = None, *, header: bool = False,
                            text_column: str | Sequence[str] = "text", label_column: str = "label",
                            skip_malformed: bool = False) -> LabeledTexts:
    """``read_original_csv`` (``header=False``, the AG News / DBpedia14 format) or ``read_labeled_csv``."""
    if header:
        return read_labeled_csv(path, text_column, label_column, num_classes=num_classes,
                                skip_malformed=skip_malformed)
    return read_original_csv(path, num_classes, skip_malformed=skip_malformed)


# ----------------------------------------------------------------------------------------------------------------
# Finding and loading the named data sets


def _source(name: str) -> TextSource:
    if name not in SOURCES:
        raise ValueError(f"unknown text data set {name!r}; known: {sorted(SOURCES)}")
    return SOURCES[name]


def _has_files(folder: Path) -> bool:
    return (folder / "train.csv").is_file() and (folder / "test.csv").is_file()


def _resolve(name: str, path) -> tuple[Path | None, list[str]]:
    """The folder to read and a list of what was tried (for the error message)."""
    _source(name)
    tried = []
    if path is not None:
        path = Path(path).expanduser()
        for folder in (path, path / name):
            if _has_files(folder):
                return folder, tried
        raise FileNotFoundError(f"path={str(path)!r} holds neither train.csv and test.csv nor {name}/train.csv and "
                                f"{name}/test.csv. Pass the folder that contains the original CSV files of {name}.")
    env = os.environ.get("BAB_DATA_DIR")
    if env:
        folder = Path(env).expanduser() / name
        if _has_files(folder):
            return folder, tried
        tried.append(f"BAB_DATA_DIR={env!r}: {folder} lacks train.csv and/or test.csv")
    else:
        tried.append("BAB_DATA_DIR: not set")
    return None, tried


def resolve_dataset_dir(name: str, path=None) -> Path | None:
    """The local folder holding ``train.csv`` and ``test.csv`` of ``name``, or None when there is none.

    Tried in order: ``path`` (the folder itself, or a folder containing ``<name>/``; an explicit path that
    holds neither raises FileNotFoundError rather than silently falling back), then ``$BAB_DATA_DIR/<name>``.
    No PyPI package ships these data sets. None tells the caller to try the Hugging Face hub.
    """
    return _resolve(name, path)[0]


def _read_class_names(folder: Path, source: TextSource) -> list[str]:
    classes = folder / "classes.txt"
    if classes.is_file():
        names = [line.strip() for line in classes.read_text(encoding="utf-8").splitlines() if line.strip()]
        if names:
            return names
    return list(source.class_names)


def _load_from_hub(name: str, source: TextSource) -> TextData:
    import datasets  # slow to import; only users who are online get here

    loaded = datasets.load_dataset(source.hub_id)
    splits = {}
    for split in ("train", "test"):
        table = loaded[split]
        columns = [table[column] for column in source.hub_text_columns]
        texts = [_join_text(parts) for parts in zip(*columns, strict=True)]
        labels = [int(label) for label in table["label"]]
        report = {"path": f"hub:{source.hub_id}/{split}", "rows": len(texts), "kept": len(texts), "skipped": 0,
                  "reasons": {}, "examples": []}
        splits[split] = LabeledTexts(texts, labels, report)
    feature = loaded["train"].features.get("label")
    class_names = list(getattr(feature, "names", None) or source.class_names)
    return TextData(name, splits["train"], splits["test"], class_names, f"hub:{source.hub_id}")


def load_text_dataset(name: str, path=None, allow_hub: bool = True, skip_malformed: bool = False) -> TextData:
    """The training and test files of ``name`` ("ag_news" or "dbpedia_14"), from the first source that works.

    Local folders first (see ``resolve_dataset_dir``), then ``datasets.load_dataset`` on the hub when
    ``allow_hub`` is set and ``HF_HUB_OFFLINE`` is not "1". When everything fails, one FileNotFoundError
    lists what was tried and how to provide the data. Tests pass ``allow_hub=False``.
    """
    source = _source(name)
    folder, tried = _resolve(name, path)
    if folder is not None:
        class_names = _read_class_names(folder, source)
        train = read_original_csv(folder / "train.csv", len(class_names), skip_malformed=skip_malformed)
        test = read_original_csv(folder / "test.csv", len(class_names), skip_malformed=skip_malformed)
        return TextData(name, train, test, class_names, str(folder))
    if not allow_hub:
        tried.append(f"Hugging Face hub {source.hub_id!r}: not tried (allow_hub=False)")
    elif os.environ.get("HF_HUB_OFFLINE") == "1":
        tried.append(f"Hugging Face hub {source.hub_id!r}: not tried (HF_HUB_OFFLINE=1)")
    else:
        try:
            return _load_from_hub(name, source)
        except Exception as error:  # any failure (no network, no package, changed format) is reported below
            tried.append(f"Hugging Face hub {source.hub_id!r}: {type(error).__name__}: {error}")
    raise FileNotFoundError(
        f"could not find the {name} data set. Tried: " + "; ".join(tried) + ". To fix: set BAB_DATA_DIR to a folder "
        f"containing {name}/train.csv and {name}/test.csv in the original CSV format (no header; class id 1-based, "
        f"title, body; optional classes.txt), or pass path= to that folder, or go online so that the hub can be used.")


# ----------------------------------------------------------------------------------------------------------------
# Stratified splits


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


# ----------------------------------------------------------------------------------------------------------------
# Word tokenizer


_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


class WordTokenizer:
    """Lower-cased words of the cleaned text; ids 0 = [PAD], 1 = [CLS], 2 = [UNK], then words.

    The vocabulary is fitted on the training split only and ordered by frequency (ties alphabetically),
    so the same texts give the same ids anywhere. ``pad_id`` 0 matches ``EncoderConfig.pad_id``.
    """

    pad_id, cls_id, unk_id = PAD, CLS, UNK
    specials_per_sequence = 1  # [CLS]

    def __init__(self, words: Sequence[str]):
        words = list(words)
        duplicates = [word for word, n in Counter(words).items() if n > 1]
        if duplicates or any(word in SPECIAL_TOKENS for word in words):
            raise ValueError(f"WordTokenizer words must be unique and exclude {SPECIAL_TOKENS}; "
                             f"found duplicates/specials {duplicates[:5] or [w for w in words if w in SPECIAL_TOKENS]}")
        self.itos = [*SPECIAL_TOKENS, *words]
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @staticmethod
    def tokenize(text: str) -> list[str]:
        text = clean_text(text).lower().replace("\u2019", "'")
        return _WORD.findall(text)

    @classmethod
    def fit(cls, texts: Sequence[str], max_vocab: int = 20_000, min_freq: int = 2) -> WordTokenizer:
        """Vocabulary of the words seen at least ``min_freq`` times; ``max_vocab`` bounds ``vocab_size``
        (the three special tokens included), keeping the most frequent words."""
        if max_vocab <= len(SPECIAL_TOKENS):
            raise ValueError(f"max_vocab must exceed the {len(SPECIAL_TOKENS)} special tokens, got {max_vocab}")
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts = Counter()
        for text in texts:
            counts.update(cls.tokenize(text))
        ranked = sorted((item for item in counts.items() if item[1] >= min_freq), key=lambda item: (-item[1], item[0]))
        return cls([word for word, _ in ranked[:max_vocab - len(SPECIAL_TOKENS)]])

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, texts: str | Sequence[str], max_len: int) -> torch.Tensor:
        """LongTensor [N, max_len]: [CLS], then word ids (unknown words as [UNK]), truncated, right-padded with 0."""
        if max_len < 2:
            raise ValueError(f"max_len must be at least 2 ([CLS] and one word), got {max_len}")
        if isinstance(texts, str):
            texts = [texts]
        ids = np.full((len(texts), max_len), PAD, dtype=np.int64)
        ids[:, 0] = CLS
        get = self.stoi.get
        for row, text in enumerate(texts):
            tokens = [get(word, UNK) for word in self.tokenize(text)[:max_len - 1]]
            ids[row, 1:1 + len(tokens)] = tokens
        return torch.from_numpy(ids)

    def decode(self, ids) -> str:
        """The tokens of one sequence, padding left out (for inspecting examples)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return " ".join(self.itos[i] for i in ids if i != PAD)

    def to_dict(self) -> dict:
        return {"type": "WordTokenizer", "specials": list(SPECIAL_TOKENS), "words": self.itos[len(SPECIAL_TOKENS):]}

    @classmethod
    def from_dict(cls, data: dict) -> WordTokenizer:
        if data.get("type") != "WordTokenizer" or list(data.get("specials", [])) != list(SPECIAL_TOKENS):
            raise ValueError(f"not a saved WordTokenizer with specials {SPECIAL_TOKENS}: keys {sorted(data)}")
        return cls(data["words"])


class PretrainedTokenizer:
    """A Hugging Face tokenizer (e.g. BERT's WordPiece) behind the WordTokenizer interface.

    ``encode`` gives [CLS] ... [SEP] ids, truncated and right-padded to ``max_len`` as the paper's
    BERT protocol does (padding="max_length"). Nothing is fitted: the vocabulary is the model's.
    """

    def __init__(self, hf_tokenizer, name: str = ""):
        if hf_tokenizer.pad_token_id is None:
            raise ValueError(f"tokenizer {name or hf_tokenizer.name_or_path!r} has no padding token; set one first")
        self.hf = hf_tokenizer
        self.name = name or hf_tokenizer.name_or_path
        self.pad_id = hf_tokenizer.pad_token_id
        self.unk_id = hf_tokenizer.unk_token_id
        self.specials_per_sequence = hf_tokenizer.num_special_tokens_to_add()

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, texts: str | Sequence[str], max_len: int) -> torch.Tensor:
        if max_len < self.specials_per_sequence + 1:
            raise ValueError(f"max_len must leave room for a word after the special tokens, got {max_len}")
        texts = [texts] if isinstance(texts, str) else [clean_text(t) for t in texts]
        return self.hf(list(texts), padding="max_length", truncation=True, max_length=max_len,
                       return_tensors="pt")["input_ids"]

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.hf.decode(ids, skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------------------------
# Everything at once


class TextClassificationData(NamedTuple):
    train: TensorDataset  # (input_ids [N, max_len] long, labels [N] long)
    val: TensorDataset
    test: TensorDataset
    tokenizer: WordTokenizer
    info: dict


def build_text_classification(name: str, num_train: int = PAPER_SPLIT_SIZES[0], num_val: int = PAPER_SPLIT_SIZES[1],
                              num_test: int = PAPER_SPLIT_SIZES[2], max_len: int = 128, seed: int = 0,
                              max_vocab: int = 20_000, min_freq: int = 2, path=None, allow_hub: bool = True,
                              skip_malformed: bool = False, tokenizer=None) -> TextClassificationData:
    """Stratified splits of ``name``, a word tokenizer fitted on the training split, and token-id tensors.

    ``tokenizer`` (e.g. a ``PretrainedTokenizer``) replaces the fitted word tokenizer; ``max_vocab``
    and ``min_freq`` then do not apply.

    Returns ``(train, val, test, tokenizer, info)``; ``info`` is JSON-serialisable: where the data came
    from, class names, file row counts and per-split sizes, class counts, [UNK] rate and how many
    sequences fill ``max_len`` (were truncated or fit exactly).
    """
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2 ([CLS] and one word), got {max_len}")
    data = load_text_dataset(name, path=path, allow_hub=allow_hub, skip_malformed=skip_malformed)
    splits = make_splits(data.train.texts, data.train.labels, data.test.texts, data.test.labels,
                         num_train, num_val, num_test, seed)
    if tokenizer is None:
        tokenizer = WordTokenizer.fit(splits["train"].texts, max_vocab=max_vocab, min_freq=min_freq)
    pad, unk = tokenizer.pad_id, tokenizer.unk_id
    tensors, split_info = {}, {}
    for split_name, split in splits.items():
        ids = tokenizer.encode(split.texts, max_len)
        labels = torch.tensor(split.labels, dtype=torch.long)
        tensors[split_name] = TensorDataset(ids, labels)
        words = ids.ne(pad).sum().item() - tokenizer.specials_per_sequence * len(ids)  # [CLS]/[SEP] are not words
        split_info[split_name] = {
            "size": len(split.labels),
            "class_counts": torch.bincount(labels, minlength=data.num_classes).tolist(),
            "unk_rate": round(ids.eq(unk).sum().item() / max(words, 1), 4),
            "fills_max_len": round(ids[:, -1].ne(pad).float().mean().item(), 4) if len(ids) else 0.0,
            "mean_tokens": round(ids.ne(pad).sum(1).float().mean().item(), 1) if len(ids) else 0.0,
        }
    info = {
        "name": name, "source": data.source, "class_names": data.class_names, "num_classes": data.num_classes,
        "files": {"train": _file_summary(data.train.report), "test": _file_summary(data.test.report)},
        "splits": split_info, "seed": seed, "max_len": max_len, "vocab_size": tokenizer.vocab_size,
        "max_vocab": max_vocab, "min_freq": min_freq,
    }
    return TextClassificationData(tensors["train"], tensors["val"], tensors["test"], tokenizer, info)


def _file_summary(report: dict) -> dict:
    return {key: report[key] for key in ("path", "rows", "skipped", "reasons")}
