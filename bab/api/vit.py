"""Sparsifiner on your own images, in one object: :class:`SparsifinerClassifier`.

    clf = SparsifinerClassifier.from_folder("photos/train", image_size=32)   # photos/train/<label>/*.png|jpg
    clf.fit(epochs=(10, 2, 8))                    # dense ViT -> predictors (phase 1) -> joint (phase 2)
    clf.sweep("photos/test", keep_rates=[1.0, 0.5, 0.25, 0.1])   # accuracy and MHSA cost per keep rate
    clf.predict(["photos/new.png"], keep_rate=0.25)              # label names

    vit = ViTForImageClassification.from_pretrained("facebook/deit-tiny-patch16-224")  # online: your own ViT
    clf = SparsifinerClassifier.from_folder("photos/train", model=vit)    # its size, channels, weights

A small ViT (transformers' ``ViTForImageClassification`` with Sparsifiner attached, ``bab.sparsifiner.vit``) is
trained from scratch (no pretrained ViT is available offline), or a transformers ViT / DeiT of your own
(``model=``: the object, a hub id or a saved folder) is fine-tuned, with notebook 05's recipe: its
Sparsifiner's recipe (``bab.sparsifiner.recipe.RECIPE``: the three training phases and the official code's predictor
options; notebook 05's profiles size the same recipe, and tuning them never changes this one), run as notebook 05's
study steps over your images (``OwnImagesStudy``, below), each through the run cache, so an
interrupted fit resumes and a repeated one is loaded. Images: one folder per class, read with Pillow,
converted to grayscale (``channels=1``) or RGB (3), resized to ``image_size`` and standardised with the training
set's mean and std.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import TensorDataset

from bab.api.data import LabelMap
from bab.core.digest import state_digest
from bab.core.runs import RunCache
from bab.core.step_clock import fit_plan, steps_per_epoch
from bab.core.threads import apply_threads
from bab.experiments.pipelines.vit import ViTStudy
from bab.experiments.pipelines.vit_profile import ViTProfile, recipe_profile
from bab.experiments.study import tensors_digest
from bab.sparsifiner.attach import attach
from bab.sparsifiner.evaluate import evaluate_vit
from bab.sparsifiner.predictor import validate_keep_rate
from bab.sparsifiner.recipe import RECIPE, SparsifinerRecipe
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward

IMAGE_MODEL_TYPES = ("vit", "deit")

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


# A small folder still trains: the default batch gives each epoch at least this many optimizer steps (the profile's
# batch of 128 would give one step an epoch on a few hundred images), and no batch is smaller than MIN_BATCH.
MIN_STEPS_PER_EPOCH = 20
MIN_BATCH = 8


def default_batch_size(num_images: int, profile_batch: int) -> int:
    """The profile's batch, or a smaller one that gives ``MIN_STEPS_PER_EPOCH`` steps an epoch (at least
    ``MIN_BATCH`` images, and never more than the folder holds)."""
    return max(1, min(profile_batch, num_images, max(MIN_BATCH, num_images // MIN_STEPS_PER_EPOCH)))


def image_sizes(paths) -> set[tuple[int, int]]:
    """The (width, height) sizes of image files, read from their headers."""
    from PIL import Image

    sizes = set()
    for path in paths:
        with Image.open(path) as img:
            sizes.add(img.size)
    return sizes


def read_image_folder(folder, image_size: int, channels: int = 1) -> tuple[np.ndarray, list[str], list[Path]]:
    """(images uint8 [N, image_size, image_size, channels], label names [N], paths [N]) of ``folder/<label>/*``."""
    from PIL import Image

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder not found: {folder} (expected one sub-folder of images per class)")
    classes = sorted(p for p in folder.iterdir() if p.is_dir())
    paths = [(f, c.name) for c in classes for f in sorted(c.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not paths:
        raise ValueError(f"{folder} holds no images in class sub-folders ({', '.join(IMAGE_SUFFIXES)}); lay it out "
                         f"as {folder}/<label>/<image>")
    images = [_load(path, image_size, channels, Image) for path, _ in paths]
    return np.stack(images), [label for _, label in paths], [path for path, _ in paths]


def _load(path: Path, image_size: int, channels: int, Image) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img = img.convert("L" if channels == 1 else "RGB").resize((image_size, image_size), Image.BILINEAR)
            array = np.asarray(img, dtype=np.uint8)
    except OSError as error:
        raise ValueError(f"{path} is not a readable image ({error}); remove it or replace it") from None
    return array[..., None] if channels == 1 else array


class SparsifinerClassifier:
    """A small ViT whose attention keeps, per query, only the connections a learnt predictor selects."""

    def __init__(self, config: ViTClassifierConfig, labels: list[str], images: np.ndarray, label_names: list[str],
                 recipe: SparsifinerRecipe = RECIPE, base_model: torch.nn.Module | None = None):
        self.config, self.recipe, self.base_model = config, recipe, base_model
        self.label_map = LabelMap(labels)
        x = torch.from_numpy(images.astype(np.float32) / 255.0).permute(0, 3, 1, 2)  # [N, C, H, W]
        self.mean = x.mean(dim=(0, 2, 3), keepdim=True)[0]  # [C, 1, 1]: the training set's statistics
        self.std = x.std(dim=(0, 2, 3), keepdim=True)[0].clamp_min(1e-6)
        self.train_set = TensorDataset(self._standardise(x), torch.tensor(self.label_map.ids(label_names)))
        self.model = None  # transformers' ViTForImageClassification with Sparsifiner attached, once fitted
        self.history: dict = {}

    @property
    def labels(self) -> list[str]:
        return list(self.label_map.names)

    @classmethod
    def from_folder(cls, folder, image_size: int = 28, patch_size: int = 4, channels: int = 1,
                    recipe: SparsifinerRecipe = RECIPE, model=None) -> SparsifinerClassifier:
        """Read the training images of ``folder/<label>/*``; the model shape is the recipe's at ``image_size``.

        ``model``: a transformers ViT or DeiT image classifier to fine-tune instead (the object, or a hub id or
        folder for ``from_pretrained``); its image size, patch size and channels are used, and its classifier is
        replaced by one for the folder's labels where their number differs."""
        base = None
        if model is not None:
            base = _image_model(model)
            c = base.config
            image_size, patch_size, channels = _side(c.image_size), _side(c.patch_size), c.num_channels
        images, names, paths = read_image_folder(folder, image_size, channels)
        sizes = image_sizes(paths)
        if sizes != {(image_size, image_size)}:
            shown = ", ".join(f"{w} x {h}" for w, h in sorted(sizes)[:3]) + (" ..." if len(sizes) > 3 else "")
            warnings.warn(f"the images in {folder} are {shown}, resized to {image_size} x {image_size}; pass "
                          f"image_size= (a multiple of patch_size={patch_size}) to train at their own size",
                          stacklevel=2)
        labels = LabelMap.fit(names, f"the images in {folder}").names
        p = recipe
        shape = {**p.model, "image_size": image_size, "patch_size": patch_size, "num_channels": channels,
                 "num_classes": len(labels)}
        if base is not None:
            _fit_classifier(base, len(labels))
            c = base.config
            shape.update(hidden_size=c.hidden_size, num_layers=c.num_hidden_layers, num_heads=c.num_attention_heads,
                         intermediate_size=c.intermediate_size)
        config = ViTClassifierConfig(**shape, connectivity=p.connectivity)
        return cls(config, labels, images, names, p, base_model=base)

    def _standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def fit(self, epochs: tuple[int, int, int] | None = None, batch_size: int | None = None, seed: int = 13,
            progress: bool = True, cache=None, threads: int | None = None) -> SparsifinerClassifier:
        """Dense ViT, then phase 1 (predictors on the frozen backbone), then phase 2 (joint, distilled from dense).

        ``epochs``: (dense, phase 1, phase 2); default: the recipe's. ``batch_size``: the global batch of every
        phase; default the recipe's, made smaller for a small folder so every epoch has at least
        ``MIN_STEPS_PER_EPOCH`` steps (``default_batch_size``). ``cache``: where each trained phase is kept (a
        ``RunCache`` or a folder; default the run cache, ``$BAB_CACHE_DIR``; ``False``: nowhere).
        ``threads``: torch threads (default ``$BAB_THREADS``, else torch's current setting; ``bab.core.threads``).
        With ``progress`` each phase prints how long it will take after its first few steps.
        """
        apply_threads(threads)
        p = self.recipe
        configs = [p.dense, p.phase1, p.phase2]
        if epochs is not None:
            if len(epochs) != 3 or min(epochs) < 1:
                raise ValueError(f"epochs must be three positive integers (dense, phase 1, phase 2), got {epochs}")
            configs = [replace(c, epochs=int(e)) for c, e in zip(configs, epochs, strict=True)]
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (or None for the default), got {batch_size}")
        num_images = len(self.train_set)
        configs = [replace(c, batch_size=batch_size or default_batch_size(num_images, c.batch_size)) for c in configs]
        profile = recipe_profile(replace(p, dense=configs[0], phase1=configs[1], phase2=configs[2]), num_images, seed)
        study = OwnImagesStudy(profile, self.config, self.train_set, cache=cache, progress=progress,
                               base_model=self.base_model)
        stages = [(c.objective, c.epochs * steps_per_epoch(num_images, c.batch_size)) for c in configs]
        with fit_plan("fit", stages, progress):
            _, dense_metrics, _ = study.dense()
            _, phase1_metrics, _ = study.predictor()
            model, phase2_metrics, _ = study.sparsifiner()
        self.history = {"dense": dense_metrics["history"], "phase1": phase1_metrics["history"],
                        "phase2": phase2_metrics["history"]}
        self.model = model.eval()
        return self

    def dataset(self, folder) -> TensorDataset:
        """(pixels [N, C, H, W] standardised like the training images, labels [N]) of ``folder/<label>/*``."""
        images, names, _ = read_image_folder(folder, self.config.image_size, self.config.num_channels)
        x = torch.from_numpy(images.astype(np.float32) / 255.0).permute(0, 3, 1, 2)
        return TensorDataset(self._standardise(x), torch.tensor(self.label_map.ids(names, f"the images in {folder}")))

    def sweep(self, folder, keep_rates=(1.0, 0.5, 0.25, 0.1)) -> pd.DataFrame:
        """Accuracy, loss and MHSA cost (fraction of dense multiply-adds) per keep rate, beside dense attention."""
        self._require_fitted()
        data = self.dataset(folder)
        rows = [{"keep_rate": None, "attention": "dense", **evaluate_vit(self.model, data)}]
        for rate in keep_rates:
            stats = evaluate_vit(self.model, data, attention="masked", keep_rate=validate_keep_rate(rate))
            rows.append({"keep_rate": rate, "attention": "sparsifiner", **stats})
        return pd.DataFrame(rows)

    @torch.no_grad()
    def predict(self, images, keep_rate: float | None = 0.25) -> list[str]:
        """Label names of image files (paths) at ``keep_rate`` (None: dense attention)."""
        from PIL import Image

        self._require_fitted()
        c = self.config
        arrays = np.stack([_load(Path(path), c.image_size, c.num_channels, Image) for path in images])
        x = self._standardise(torch.from_numpy(arrays.astype(np.float32) / 255.0).permute(0, 3, 1, 2))
        forward = {} if keep_rate is None else {"attention": "masked", "keep_rate": validate_keep_rate(keep_rate)}
        logits = vit_forward(self.model.eval(), x, **forward).logits
        return [self.labels[i] for i in logits.argmax(-1).tolist()]

    def __repr__(self) -> str:
        c, more = self.config, " ..." if len(self.labels) > 5 else ""
        return (f"SparsifinerClassifier({len(self.labels)} classes {self.labels[:5]}{more}, "
                f"{len(self.train_set)} training images {c.image_size} x {c.image_size} x {c.num_channels}, "
                f"ViT {c.num_layers} layers x {c.num_heads} heads, patch {c.patch_size}, {c.num_tokens} tokens, "
                f"{'fitted' if self.model is not None else 'not fitted: call fit()'})")

    def _require_fitted(self) -> None:
        if self.model is None:
            raise ValueError("call fit() first: the ViT and its predictors are trained from the images")


def _side(size) -> int:
    """A transformers config's image or patch size (an int, or a pair of equal sides)."""
    if isinstance(size, int):
        return size
    if len(size) != 2 or size[0] != size[1]:
        raise ValueError(f"square images and patches only, got {tuple(size)}")
    return int(size[0])


def _image_model(model) -> torch.nn.Module:
    """A transformers ViT / DeiT image classifier from an object, a hub id or a saved folder."""
    if isinstance(model, (str, Path)):
        from transformers import AutoModelForImageClassification

        model = AutoModelForImageClassification.from_pretrained(str(model))
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in IMAGE_MODEL_TYPES or not isinstance(getattr(model, "classifier", None), torch.nn.Linear):
        raise ValueError(f"model must be transformers' ViTForImageClassification or DeiTForImageClassification (an "
                         f"object, a hub id or a folder), got {type(model).__name__} with model_type {model_type!r}")
    return model


def _fit_classifier(model: torch.nn.Module, num_labels: int) -> None:
    """Give ``model`` (in place) a fresh classifier for ``num_labels`` classes where its own has another number."""
    if model.classifier.out_features != num_labels:
        model.classifier = torch.nn.Linear(model.classifier.in_features, num_labels)
        model.config.num_labels = num_labels


class OwnImagesStudy(ViTStudy):
    """The dense -> phase 1 -> phase 2 steps on a caller's own training images (``SparsifinerClassifier.fit``):
    ``config`` is the Sparsifiner model (the dense one is it without predictors), ``train`` a TensorDataset of
    (pixels, label ids). No validation split: the last epoch is kept. Runs are keyed by the digest of ``train``.

    ``base_model``: a transformers ViT / DeiT image classifier of the caller's, whose copies (Sparsifiner attached)
    every step starts from instead of a random ViT of ``config``'s shape; its weights' digest keys the runs."""

    experiment = "own_images"

    def __init__(self, profile: ViTProfile, config: ViTClassifierConfig, train, cache: RunCache | None = None,
                 progress: bool = True, base_model=None):
        super().__init__(profile, cache, progress)
        self.config, self.train_set, self.base_model = config, train, base_model

    def splits(self) -> dict:
        return {"train": self.train_set}

    def data_lineage(self) -> dict:
        lineage = {"train": tensors_digest(self.train_set)}
        if self.base_model is not None:
            lineage["base_model"] = {"class": type(self.base_model).__name__, "weights": state_digest(self.base_model)}
        return lineage

    def build(self, model_config: ViTClassifierConfig):
        if self.base_model is None:
            return build_vit(model_config)
        return attach(copy.deepcopy(self.base_model), model_config.connectivity, core="dense",
                      linformer_len=model_config.linformer_len)

    def model_config(self, **extra) -> ViTClassifierConfig:
        return replace(self.config, connectivity=None, **extra)

    def sparsifiner_config(self) -> ViTClassifierConfig:
        return self.config
