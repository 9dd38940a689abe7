"""Fixtures of the API tests (imported by each test module: a conftest.py here would shadow the root one, which
tests import as `conftest`): a tiny random-initialised BERT saved as a local model folder, small labelled CSVs,
and a run cache of the module's own (``fit`` trains through the run cache; tests never write the user's).

The folder is what a user's own encoder looks like to ``BudgetedClassifier.from_pretrained`` (config.json,
model.safetensors, a WordPiece vocabulary), so every code path of a hub or packaged model runs here in
seconds and offline. The texts are three topics with disjoint words, so a few epochs learn them.
"""

import pytest
import torch
from api_topics import FILLER, TOPICS, topic_texts, write_csv
from transformers import BertConfig, BertModel, BertTokenizer


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """A local folder with a 2-layer x 4-head random BERT encoder (no classifier) and its tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({w for t in TOPICS.values() for w in t.split()}
                                                                   | set(FILLER))]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=0,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # deterministic: 1 vs N processes
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def topic_csvs(tmp_path_factory):
    """(train.csv with 40 rows per class, test.csv with 10 per class), header text,label, string labels."""
    folder = tmp_path_factory.mktemp("topics")
    return (write_csv(folder / "train.csv", topic_texts(40, seed=1)),
            write_csv(folder / "test.csv", topic_texts(10, seed=2)))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: tiny matrices on a shared 2-core machine run 100x slower with two competing threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="module")
def run_cache(tmp_path_factory):
    """``$BAB_CACHE_DIR``: a fresh folder per test module, so ``fit`` trains (and caches) there."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("run-cache")
        patch.setenv("BAB_CACHE_DIR", str(folder))
        yield folder


def pattern(kind: str, rng):
    """An 8x8 grayscale image (uint8): horizontal stripes, vertical stripes, or a bright square, with noise."""
    import numpy as np

    img = rng.integers(0, 60, (8, 8))
    if kind == "horizontal":
        img[::2] += 180
    elif kind == "vertical":
        img[:, ::2] += 180
    else:
        img[2:6, 2:6] += 180
    return img.clip(0, 255).astype(np.uint8)


def write_image_folders(root, counts: dict) -> None:
    """``root/<split>/<kind>/<i>.png``: ``counts[split]`` images of each of the three patterns, seeded."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in counts.items():
        for kind in ("horizontal", "vertical", "square"):
            (root / split / kind).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(pattern(kind, rng)).save(root / split / kind / f"{i}.png")
