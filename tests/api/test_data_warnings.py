"""What a user's data gets told: texts cut at the model length are counted, classes with a handful of training texts
are named, and long label lists stay one line in every message."""

import warnings

import api_fixtures
import pytest
from api_topics import topic_texts
from transformers import BertTokenizer

from bab.api.data import (
    MIN_TEXTS_PER_CLASS,
    FewExamplesWarning,
    LabeledTexts,
    LabelMap,
    TruncationWarning,
    encode,
    shorten,
    warn_if_few,
)
from bab.data.text import PretrainedTokenizer

tiny_encoder = api_fixtures.tiny_encoder


@pytest.fixture
def tokenizer(tiny_encoder):
    return PretrainedTokenizer(BertTokenizer.from_pretrained(str(tiny_encoder)))


def test_truncated_texts_are_counted(tokenizer):
    # [CLS] + words + [SEP]: a text of n known words is n + 2 tokens, written out here
    texts = LabeledTexts(["goal", "goal match", "goal match team win", "goal match team win cup"],
                         ["sports"] * 4, "mine.csv")
    labels = LabelMap(["music", "sports"])
    with pytest.warns(TruncationWarning, match=r"^2 of 4 texts in the data \(mine.csv\) truncated to 5 tokens"):
        encode(texts, labels, tokenizer, max_len=5, what="the data (mine.csv)")
    assert tokenizer.count_truncated(texts.texts, 6) == 1 and tokenizer.count_truncated(texts.texts, 7) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset = encode(texts, labels, tokenizer, max_len=7)  # nothing cut: no warning
    assert dataset.tensors[0].shape == (4, 7)


def test_classes_with_few_training_texts_are_named():
    rows = topic_texts(MIN_TEXTS_PER_CLASS, seed=0)
    kept = [r for r in rows if r[1] != "sports"] + [r for r in rows if r[1] == "sports"][:3]
    data = LabeledTexts([t for t, _ in kept], [label for _, label in kept], "train.csv")
    with pytest.warns(FewExamplesWarning, match=f"1 class\\(es\\) with fewer than {MIN_TEXTS_PER_CLASS} texts "
                                                f"\\('sports': 3\\)"):
        warn_if_few(data, LabelMap.fit(data.labels))
    full = LabeledTexts([t for t, _ in rows], [label for _, label in rows], "train.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_few(full, LabelMap.fit(full.labels))


def test_a_long_label_list_stays_one_line():
    names = [f"class{i:03d}" for i in range(200)]
    assert shorten(names) == ", ".join(names[:8]) + ", ... (192 more, 200 in all)"
    assert shorten(names[:3]) == "class000, class001, class002"
    with pytest.raises(ValueError) as raised:
        LabelMap(names).ids(["class999"], "the test data")
    message = str(raised.value)
    assert "class199" not in message and "200 in all" in message and "\n" not in message
