"""SparsifinerClassifier on a tiny image folder: stripes and dots in three class sub-folders."""

import warnings

import api_fixtures
import numpy as np
import pytest
import torch
from PIL import Image

from bab.api.vit import SparsifinerClassifier, read_image_folder

# pytest fixtures shared by the API tests (a conftest.py here would shadow the root one)
one_thread = api_fixtures.one_thread
run_cache = api_fixtures.run_cache


@pytest.fixture(scope="module")
def image_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    api_fixtures.write_image_folders(root, {"train": 24, "test": 6})
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


def stripes(horizontal: bool, rng, size: int = 28) -> np.ndarray:
    """A size x size grayscale image of stripes 2 pixels wide, at a random phase, with noise."""
    img = rng.integers(0, 80, (size, size))
    phase = int(rng.integers(0, 4))
    lines = (np.arange(size) + phase) % 4 < 2
    if horizontal:
        img[lines] += 160
    else:
        img[:, lines] += 160
    return img.clip(0, 255).astype(np.uint8)


# slow (about 25 s): the README's defaults train for real: the dense ViT and both Sparsifiner phases on 120 images
@pytest.mark.slow
def test_the_readme_snippet_learns_a_small_two_class_folder(tmp_path):
    rng = np.random.default_rng(1)
    for split, n in (("train", 60), ("test", 20)):
        for kind in ("horizontal", "vertical"):
            (tmp_path / split / kind).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(stripes(kind == "horizontal", rng)).save(tmp_path / split / kind / f"{i}.png")
    torch.manual_seed(0)
    vit = SparsifinerClassifier.from_folder(tmp_path / "train")  # 28 x 28, as the images are: no warning
    assert "2 classes ['horizontal', 'vertical'], 120 training images 28 x 28 x 1" in repr(vit)
    assert repr(vit).endswith("not fitted: call fit())")
    vit.fit(progress=False)  # the defaults: 120 images give batches of 8, 15 steps an epoch (not 1 of 128)
    assert repr(vit).endswith("fitted)")
    sweep = vit.sweep(tmp_path / "test", keep_rates=[1.0, 0.5, 0.25, 0.1])
    assert (sweep["accuracy"] >= 85).all(), sweep  # two balanced classes: chance is 50%


def test_small_folders_get_batches_with_enough_steps():
    from bab.api.vit import default_batch_size

    assert default_batch_size(10_000, 128) == 128  # a large folder keeps the profile's batch
    assert default_batch_size(1_000, 128) == 50  # 20 steps an epoch
    assert default_batch_size(120, 128) == 8  # never below 8 images ...
    assert default_batch_size(5, 128) == 5  # ... nor above the folder


def test_a_folder_of_another_size_warns(image_folders):
    with pytest.warns(UserWarning, match=r"are 8 x 8, resized to 28 x 28; pass image_size="):
        SparsifinerClassifier.from_folder(image_folders[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SparsifinerClassifier.from_folder(image_folders[1], image_size=8, patch_size=2)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        SparsifinerClassifier.from_folder(image_folders[1], image_size=8, patch_size=2).fit(batch_size=0)


def test_fit_fine_tunes_a_transformers_vit_object_of_the_users(image_folders, tmp_path):
    """A ViT the user already has (random weights here; a pretrained one online): its shape and weights are used, its
    1000-way classifier is replaced by one for the folder's three labels, and the fitted model is that class with
    Sparsifiner attached. Its starting weights key the runs: another base model trains anew."""
    from transformers import ViTConfig, ViTForImageClassification

    from bab.sparsifiner.attach import predictors

    def base(seed):
        torch.manual_seed(seed)
        return ViTForImageClassification(ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16,
                                                   num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                                   num_labels=1000))

    user_model = base(0)
    before = {k: v.clone() for k, v in user_model.state_dict().items()}
    clf = SparsifinerClassifier.from_folder(image_folders[0], model=user_model)
    assert (clf.config.image_size, clf.config.patch_size, clf.config.num_layers) == (8, 4, 2)
    assert user_model.classifier.out_features == 3 and user_model.config.num_labels == 3
    clf.fit(epochs=(2, 1, 1), batch_size=16, progress=False, cache=tmp_path)
    assert type(clf.model) is ViTForImageClassification and len(predictors(clf.model)) == 2
    assert clf.model is not user_model  # the user's object is copied, not trained in place
    assert all(torch.equal(before[k], v) for k, v in user_model.state_dict().items() if not k.startswith("classifier"))
    sweep = clf.sweep(image_folders[1], keep_rates=[0.5])
    assert sweep["accuracy"].between(0, 100).all()
    # the dense step started from the user's weights: a fit from another base model is another run
    again = SparsifinerClassifier.from_folder(image_folders[0], model=base(1))
    again.fit(epochs=(2, 1, 1), batch_size=16, progress=False, cache=tmp_path)
    assert not torch.equal(again.model.vit.embeddings.cls_token, clf.model.vit.embeddings.cls_token)


def test_a_model_that_is_not_a_vit_is_refused_with_the_supported_classes(image_folders):
    from transformers import BertConfig, BertForSequenceClassification

    bert = BertForSequenceClassification(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=32))
    with pytest.raises(ValueError, match="ViTForImageClassification or DeiTForImageClassification"):
        SparsifinerClassifier.from_folder(image_folders[0], model=bert)


def test_fit_trains_the_methods_recipe_whatever_the_notebook_profiles_say(image_folders, monkeypatch):
    """The recipe belongs to Sparsifiner (bab.sparsifiner.recipe): tuning notebook 05's profiles leaves it alone."""
    from dataclasses import replace

    from bab.experiments import vit
    from bab.sparsifiner.recipe import RECIPE

    before = SparsifinerClassifier.from_folder(image_folders[0], image_size=8, patch_size=2)
    for name, profile in list(vit.VIT.items()):
        monkeypatch.setitem(vit.VIT, name, replace(profile, connectivity=profile.connectivity.replace(n_down=2),
                                                   dense=replace(profile.dense, epochs=99)))
    after = SparsifinerClassifier.from_folder(image_folders[0], image_size=8, patch_size=2)
    assert after.recipe is RECIPE and after.config == before.config
    assert after.config.connectivity == RECIPE.connectivity and RECIPE.connectivity.n_down == 8
    assert (RECIPE.dense.epochs, RECIPE.phase1.epochs, RECIPE.phase2.epochs) == (10, 2, 8)
