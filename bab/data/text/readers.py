"""Reading classification CSV files: the original AG News / DBpedia14 format, any CSV with a header, cleanup.

Files are read with the ``csv`` module rather than pandas so that quoting, embedded newlines and
malformed rows are handled explicitly and reported with the line they start on. Texts are kept raw
(cleanup is the tokenizer's job, ``clean_text``), so that what is read equals what is in the file.
"""

from __future__ import annotations

import csv
import html
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple


class LabeledTexts(NamedTuple):
    """Texts with 0-based integer labels; ``report`` says how many rows were read and skipped, and why."""

    texts: list[str]
    labels: list[int]
    report: dict


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


def join_text(parts: Sequence[str]) -> str:
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
            text = join_text(row[1:])
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
            text = join_text([row[i] for i in text_idx])
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
