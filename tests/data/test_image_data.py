"""Fashion-MNIST IDX reading: sources, clear errors for bad files, seeded stratified splits."""

import gzip
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from bab.data import images
from bab.data.images import IDXError, image_splits, load_fashion_mnist, read_idx, resolve_image_dir

DATA_DIR = os.environ.get("BAB_DATA_DIR")


def idx_images(array: np.ndarray) -> bytes:
    n, r, c = array.shape
    return struct.pack(">IIII", 0x803, n, r, c) + array.astype(np.uint8).tobytes()


def idx_labels(array: np.ndarray) -> bytes:
    return struct.pack(">II", 0x801, len(array)) + array.astype(np.uint8).tobytes()


def write_set(folder: Path, n_train=40, n_test=20, gz=True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    parts = {
        "train-images-idx3-ubyte": idx_images(rng.integers(0, 256, (n_train, 28, 28))),
        "train-labels-idx1-ubyte": idx_labels(np.arange(n_train) % 10),
        "t10k-images-idx3-ubyte": idx_images(rng.integers(0, 256, (n_test, 28, 28))),
        "t10k-labels-idx1-ubyte": idx_labels(np.arange(n_test) % 10),
    }
    for stem, data in parts.items():
        if gz:
            (folder / (stem + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)
    return folder


@pytest.mark.parametrize("gz", [True, False])
def test_reads_gzipped_and_plain_idx(tmp_path, gz):
    folder = write_set(tmp_path / "fm", gz=gz)
    data = load_fashion_mnist(folder, allow_hub=False)
    assert data.train_images.shape == (40, 28, 28) and data.test_images.shape == (20, 28, 28)
    assert data.train_labels.tolist() == [i % 10 for i in range(40)]
    assert data.source == str(folder)


def test_explicit_path_may_be_the_parent_folder(tmp_path):
    write_set(tmp_path / "fashion_mnist")
    assert resolve_image_dir(tmp_path)[0] == tmp_path / "fashion_mnist"


def test_missing_files_name_what_is_missing(tmp_path):
    folder = write_set(tmp_path / "fm")
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        load_fashion_mnist(folder, allow_hub=False)


def test_no_source_at_all_lists_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(images, "DEBIAN_DIR", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"BAB_DATA_DIR=.*nowhere.*allow_hub=False.*To fix"):
        load_fashion_mnist(allow_hub=False)


def test_truncated_file_says_how_many_bytes_are_missing(tmp_path):
    path = tmp_path / "t.idx"
    path.write_bytes(idx_images(np.zeros((3, 28, 28)))[:-100])
    with pytest.raises(IDXError, match=r"t.idx: truncated, the header promises 2352 bytes.*only 2252"):
        read_idx(path)


def test_corrupt_gzip_and_bad_magic_and_short_header(tmp_path):
    bad_gz = tmp_path / "a.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"not really gzip")
    with pytest.raises(IDXError, match="a.gz: corrupt gzip stream"):
        read_idx(bad_gz)
    bad_magic = tmp_path / "b"
    bad_magic.write_bytes(struct.pack(">II", 0x1234, 0))
    with pytest.raises(IDXError, match="magic number 0x00001234"):
        read_idx(bad_magic)
    short = tmp_path / "c"
    short.write_bytes(b"\x00\x00")
    with pytest.raises(IDXError, match="too short for an IDX header"):
        read_idx(short)
    extra = tmp_path / "d"
    extra.write_bytes(idx_labels(np.zeros(4)) + b"\x00")
    with pytest.raises(IDXError, match="1 unexpected bytes"):
        read_idx(extra)


def test_swapped_files_and_mismatched_counts_are_caught(tmp_path):
    folder = write_set(tmp_path / "fm", gz=False)
    labels = (folder / "train-labels-idx1-ubyte").read_bytes()
    (folder / "train-labels-idx1-ubyte").write_bytes((folder / "train-images-idx3-ubyte").read_bytes())
    with pytest.raises(IDXError, match="expected an IDX labels file.*swapped"):
        load_fashion_mnist(folder, allow_hub=False)
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_labels(np.zeros(39)))
    with pytest.raises(IDXError, match="40 images but .* 39 labels"):
        load_fashion_mnist(folder, allow_hub=False)
    (folder / "train-labels-idx1-ubyte").write_bytes(labels[:-1] + b"\x0c")
    with pytest.raises(IDXError, match="label 12, outside 0..9"):
        load_fashion_mnist(folder, allow_hub=False)


def test_splits_are_stratified_seeded_and_disjoint(tmp_path):
    data = load_fashion_mnist(write_set(tmp_path / "fm", n_train=200, n_test=50), allow_hub=False)
    a = image_splits(data, 100, 50, 30, seed=7)
    b = image_splits(data, 100, 50, 30, seed=7)
    c = image_splits(data, 100, 50, 30, seed=8)
    assert [len(a[s]) for s in ("train", "val", "test")] == [100, 50, 30]
    assert a["train"].tensors[1].bincount().tolist() == [10] * 10
    for name in a:
        assert all(x.equal(y) for x, y in zip(a[name].tensors, b[name].tensors, strict=True))
    assert not a["train"].tensors[0].equal(c["train"].tensors[0])
    train_rows = {t.numpy().tobytes() for t in a["train"].tensors[0]}
    assert not any(t.numpy().tobytes() in train_rows for t in a["val"].tensors[0])
    x = a["train"].tensors[0]
    assert x.shape == (100, 1, 28, 28) and x.dtype.is_floating_point


@pytest.mark.data
@pytest.mark.skipif(not DATA_DIR or resolve_image_dir()[0] is None, reason="Fashion-MNIST not found")
def test_the_real_files_have_the_published_counts():
    data = load_fashion_mnist(allow_hub=False)
    assert data.train_images.shape == (60000, 28, 28) and data.test_images.shape == (10000, 28, 28)
    assert np.bincount(data.train_labels).tolist() == [6000] * 10
    assert np.bincount(data.test_labels).tolist() == [1000] * 10
