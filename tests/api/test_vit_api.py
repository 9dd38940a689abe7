"""SparsifinerClassifier on a tiny image folder: stripes and dots in three class sub-folders."""

import api_fixtures
import numpy as np
import pytest
import torch
from PIL import Image

from bab.api.vit import SparsifinerClassifier, read_image_folder

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread
run_cache = api_fixtures.run_cache


def pattern(kind: str, rng) -> np.ndarray:
    """An 8x8 grayscale image: horizontal stripes, vertical stripes, or a bright square, with noise."""
    img = rng.integers(0, 60, (8, 8))
    if kind == "horizontal":
        img[::2] += 180
    elif kind == "vertical":
        img[:, ::2] += 180
    else:
        img[2:6, 2:6] += 180
    return img.clip(0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def image_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("test", 6)):
        for kind in ("horizontal", "vertical", "square"):
            (root / split / kind).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(pattern(kind, rng)).save(root / split / kind / f"{i}.png")
    return root / "train", root / "test"


def test_read_image_folder_labels_and_shapes(image_folders):
    images, labels, paths = read_image_folder(image_folders[1], image_size=8)
    assert images.shape == (18, 8, 8, 1) and images.dtype == np.uint8
    assert sorted(set(labels)) == ["horizontal", "square", "vertical"]
    assert all(path.parent.name == label for path, label in zip(paths, labels, strict=True))


def test_fit_sweep_predict(image_folders):
    torch.manual_seed(0)
    clf = SparsifinerClassifier.from_folder(image_folders[0], image_size=8, patch_size=2)
    clf.fit(epochs=(15, 1, 2), batch_size=16, progress=False)
    sweep = clf.sweep(image_folders[1], keep_rates=[1.0, 0.25])
    assert sweep["attention"].tolist() == ["dense", "sparsifiner", "sparsifiner"]
    assert sweep.loc[0, "accuracy"] > 100 / 3 + 30  # three balanced classes: chance is 33%
    # keep 0.25 costs less than keep 1.0 (which costs more than dense: the predictor is overhead at 17 tokens)
    assert sweep.loc[2, "cost"] < sweep.loc[1, "cost"]
    paths = sorted(image_folders[1].glob("*/*.png"))[:4]
    assert set(clf.predict(paths, keep_rate=0.25)) <= set(clf.labels)


def test_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        SparsifinerClassifier.from_folder(tmp_path / "nowhere")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no images in class sub-folders"):
        SparsifinerClassifier.from_folder(tmp_path / "empty")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "empty" / "a" / "0.png")
    with pytest.raises(ValueError, match="one class only"):
        SparsifinerClassifier.from_folder(tmp_path / "empty", image_size=8, patch_size=2)
