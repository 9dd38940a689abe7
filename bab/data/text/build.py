"""Everything at once: stratified splits of a named data set, a tokenizer, token-id tensors and a summary."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.data import TensorDataset

from bab.data.text.datasets import load_text_dataset
from bab.data.text.splits import PAPER_SPLIT_SIZES, make_splits
from bab.data.text.tokenizers import WordTokenizer


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


def sort_by_length(dataset: TensorDataset, pad_id: int) -> TensorDataset:
    """The same (input_ids [N, T], labels [N]) examples, longest first (stable).

    Evaluation batches then hold texts of similar length, which a model that trims the batch's shared
    trailing padding runs faster; accuracy is unchanged, the order of per-example outputs is not.
    """
    ids, labels = dataset.tensors
    order = torch.argsort(ids.ne(pad_id).sum(1), descending=True, stable=True)
    return TensorDataset(ids[order], labels[order])
