"""Fashion-MNIST from the original IDX files (Sparsifiner notebook 05).

Where the data comes from (docs/data-and-models.md), through the one resolver of ``bab.core.sources``,
in order: an explicit folder; ``$BAB_DATA_DIR/fashion_mnist``; the Debian package path
``/usr/share/datasets/fashion-mnist``; the Hugging Face hub (``zalando-datasets/fashion_mnist``) for
users who are online. A folder holds the four original files (gzip-compressed or not):

    train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz  t10k-images-idx3-ubyte.gz  t10k-labels-idx1-ubyte.gz

IDX format (yann.lecun.com/exdb/mnist): a big-endian header, magic 0x00000803 for images (then item
count, rows, columns as uint32) or 0x00000801 for labels (then item count), followed by uint8 data.
Every way a file can be wrong (missing, not gzip, wrong magic, truncated, counts that disagree,
labels out of range) raises an error that names the file and what was wrong.

Splits: train and validation from the training file (disjoint, stratified by class, seeded), test
from the test file, with the same ``make_splits`` as the text data sets.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from bab.core.sources import Found, Place, find_source, hub_place, standard_places
from bab.data.text.splits import make_splits

NAME = "fashion_mnist"
HUB_ID = "zalando-datasets/fashion_mnist"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
# Per-pixel statistics of the Fashion-MNIST training set (on the 0..1 scale), used to standardise inputs.
MEAN, STD = 0.2860, 0.3530


class IDXError(ValueError):
    """An IDX file that cannot be read; the message names the file and what was wrong."""


def _open_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise IDXError(f"{path}: corrupt gzip stream ({exc}); re-download the file") from exc
    return raw


def read_idx(path, expected_magic: int | None = None) -> np.ndarray:
    """One IDX file (optionally gzipped) as a uint8 array: [N, rows, cols] for images, [N] for labels."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file {path} does not exist")
    data = _open_bytes(path)
    if len(data) < 8:
        raise IDXError(f"{path}: only {len(data)} bytes, too short for an IDX header (at least 8)")
    magic, count = struct.unpack(">II", data[:8])
    if magic not in (IMAGES_MAGIC, LABELS_MAGIC):
        raise IDXError(f"{path}: magic number 0x{magic:08x} is not an IDX image (0x{IMAGES_MAGIC:08x}) or label "
                       f"(0x{LABELS_MAGIC:08x}) file")
    if expected_magic is not None and magic != expected_magic:
        kind = "images" if expected_magic == IMAGES_MAGIC else "labels"
        raise IDXError(f"{path}: expected an IDX {kind} file (magic 0x{expected_magic:08x}), found magic 0x{magic:08x}"
                       "; are the image and label files swapped?")
    if magic == IMAGES_MAGIC:
        if len(data) < 16:
            raise IDXError(f"{path}: truncated image header ({len(data)} of 16 bytes)")
        rows, cols = struct.unpack(">II", data[8:16])
        shape, offset = (count, rows, cols), 16
    else:
        shape, offset = (count,), 8
    expected = int(np.prod(shape))
    body = len(data) - offset
    if body < expected:
        dims = " x ".join(map(str, shape))
        raise IDXError(f"{path}: truncated, the header promises {expected} bytes of data ({dims}) but only {body} "
                       "are present")
    if body > expected:
        raise IDXError(f"{path}: {body - expected} unexpected bytes after the {expected} bytes of data the header "
                       "promises; the file is not a valid IDX file")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _has_files(folder: Path) -> bool:
    return all(_find(folder, stem) is not None for stem in FILES.values())


def _lacks(folder: Path) -> str:
    missing = [stem for stem in FILES.values() if _find(folder, stem) is None]
    return f"the IDX files {missing} (with or without .gz)"


def _find_source(path, hub: Place | None) -> Found:
    """The first place holding the four IDX files, and what was tried; an explicit path that lacks them raises."""
    debian = Place("Debian package dataset-fashion-mnist", DEBIAN_DIR)  # read at call time: tests move it
    found = find_source(standard_places(path, NAME, system=[debian], hub=hub), _has_files, _lacks)
    if path is not None:
        found.require(f"path={str(Path(path).expanduser())!r} lacks some of the four IDX files, directly and in "
                      f"{NAME}/",
                      f"pass the folder that holds the four IDX files ({', '.join(FILES.values())}, gzipped or "
                      f"not), or its parent")
    return found


def resolve_image_dir(path=None) -> tuple[Path | None, list[str]]:
    """The folder holding the four IDX files, and what was tried.

    ``path`` (the folder itself or a folder containing ``fashion_mnist/``) must hold them: an explicit
    path that does not raises FileNotFoundError instead of silently falling back.
    """
    found = _find_source(path, hub=None)
    return found.folder, list(found.tried)


@dataclass
class ImageData:
    """uint8 images [N, 28, 28] and int64 labels [N] of the training and test files."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str
    class_names: tuple[str, ...] = CLASS_NAMES


def _read_folder(folder: Path) -> ImageData:
    arrays = {}
    for key, stem in FILES.items():
        magic = IMAGES_MAGIC if key.endswith("images") else LABELS_MAGIC
        arrays[key] = read_idx(_find(folder, stem), expected_magic=magic)
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if len(images) != len(labels):
            raise IDXError(f"{folder}: {FILES[split + '_images']} holds {len(images)} images but "
                           f"{FILES[split + '_labels']} holds {len(labels)} labels")
        if labels.size and labels.max() >= len(CLASS_NAMES):
            raise IDXError(f"{folder}: {FILES[split + '_labels']} has label {labels.max()}, outside 0..9")
    return ImageData(arrays["train_images"], arrays["train_labels"].astype(np.int64), arrays["test_images"],
                     arrays["test_labels"].astype(np.int64), str(folder))


def _load_from_hub() -> ImageData:
    import datasets  # slow to import; only users who are online get here

    loaded = datasets.load_dataset(HUB_ID)
    out = {}
    for split in ("train", "test"):
        table = loaded[split]
        out[split + "_images"] = np.stack([np.asarray(img, dtype=np.uint8) for img in table["image"]])
        out[split + "_labels"] = np.asarray(table["label"], dtype=np.int64)
    return ImageData(**out, source=f"hub:{HUB_ID}")


def load_fashion_mnist(path=None, allow_hub: bool = True) -> ImageData:
    """The Fashion-MNIST training and test files from the first source that works (see the module doc)."""
    found = _find_source(path, hub=hub_place(HUB_ID, allow_hub))
    if found.folder is not None:
        return _read_folder(found.folder)
    if found.hub_id is not None:
        try:
            return _load_from_hub()
        except Exception as error:  # no network, no package, changed format: reported below
            found = found.failed(f"{type(error).__name__}: {error}")
    raise found.error(
        "could not find Fashion-MNIST",
        f"set BAB_DATA_DIR to a folder containing {NAME}/ with the four original IDX files "
        f"({', '.join(FILES.values())}, gzipped or not), or pass path= to that folder, or install the Debian "
        "package dataset-fashion-mnist, or go online")


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W] -> standardised float [N, 1, H, W] (training-set mean and std)."""
    x = torch.from_numpy(np.array(images, dtype=np.float32)).div_(255.0).unsqueeze(1)
    return (x - MEAN) / STD


def image_splits(data: ImageData, num_train: int, num_val: int, num_test: int, seed: int) -> dict[str, TensorDataset]:
    """Stratified, seeded train / validation (from the training file) and test (from the test file) splits.

    Each is a TensorDataset of (pixels [N, 1, 28, 28] float, labels [N] int64).
    """
    train_idx = np.arange(len(data.train_labels))
    test_idx = np.arange(len(data.test_labels))
    splits = make_splits(train_idx, data.train_labels, test_idx, data.test_labels, num_train, num_val, num_test, seed)
    out = {}
    for name, split in splits.items():
        images = data.test_images if name == "test" else data.train_images
        rows = np.asarray(split.texts, dtype=np.int64)  # the "texts" are row numbers here
        out[name] = TensorDataset(to_tensor(images[rows]), torch.as_tensor(split.labels, dtype=torch.int64))
    return out
