"""The named text classification data sets, AG News and DBpedia14 (budgeted-attention paper, section 6.2).

Where the data comes from (docs/data-and-models.md), through the one resolver of ``bab.core.sources``:
an explicit folder, then ``$BAB_DATA_DIR/<name>``, then the Hugging Face hub for users who are online.
No PyPI package ships these data sets. Local folders hold the original CSV files (no header; class id
1-based, title, body; optionally ``classes.txt``), read by ``bab.data.text.readers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bab.core.sources import Found, find_source, hub_place, standard_places
from bab.data.text.readers import LabeledTexts, join_text, read_original_csv


@dataclass(frozen=True)
class TextSource:
    """What the loader needs to know about one named data set."""

    hub_id: str
    num_classes: int
    class_names: tuple[str, ...]
    hub_text_columns: tuple[str, ...]  # joined with a space, like title + " " + body in the CSV files


SOURCES = {
    "ag_news": TextSource("ag_news", 4, ("World", "Sports", "Business", "Sci/Tech"), ("text",)),
    "dbpedia_14": TextSource(
        "fancyzhx/dbpedia_14", 14,
        ("Company", "EducationalInstitution", "Artist", "Athlete", "OfficeHolder", "MeanOfTransportation", "Building",
         "NaturalPlace", "Village", "Animal", "Plant", "Album", "Film", "WrittenWork"),
        ("title", "content")),
}


@dataclass
class TextData:
    """Raw (untokenised) training and test files of one data set, and where they came from."""

    name: str
    train: LabeledTexts
    test: LabeledTexts
    class_names: list[str]
    source: str  # a folder, or "hub:<id>"
    num_classes: int = field(init=False)

    def __post_init__(self):
        self.num_classes = len(self.class_names)


def _source(name: str) -> TextSource:
    if name not in SOURCES:
        raise ValueError(f"unknown text data set {name!r}; known: {sorted(SOURCES)}")
    return SOURCES[name]


def _has_files(folder: Path) -> bool:
    return (folder / "train.csv").is_file() and (folder / "test.csv").is_file()


def _find(name: str, path, allow_hub: bool = True) -> Found:
    """The first place holding ``name`` and what was tried; an explicit path that lacks it raises."""
    source = _source(name)
    places = standard_places(path, name, hub=hub_place(source.hub_id, allow_hub))
    found = find_source(places, _has_files, "train.csv and/or test.csv")
    if path is not None:
        found.require(f"path={str(Path(path).expanduser())!r} holds neither train.csv and test.csv nor "
                      f"{name}/train.csv and {name}/test.csv",
                      f"pass the folder that contains the original CSV files of {name}")
    return found


def resolve_dataset_dir(name: str, path=None) -> Path | None:
    """The local folder holding ``train.csv`` and ``test.csv`` of ``name``, or None when there is none.

    Tried in order: ``path`` (the folder itself, or a folder containing ``<name>/``; an explicit path that
    holds neither raises FileNotFoundError rather than silently falling back), then ``$BAB_DATA_DIR/<name>``.
    No PyPI package ships these data sets. None tells the caller to try the Hugging Face hub.
    """
    return _find(name, path).folder


def _read_class_names(folder: Path, source: TextSource) -> list[str]:
    classes = folder / "classes.txt"
    if classes.is_file():
        names = [line.strip() for line in classes.read_text(encoding="utf-8").splitlines() if line.strip()]
        if names:
            return names
    return list(source.class_names)


def _load_from_hub(name: str, source: TextSource) -> TextData:
    import datasets as hf_datasets  # Hugging Face's package, slow to import; only users who are online get here

    loaded = hf_datasets.load_dataset(source.hub_id)
    splits = {}
    for split in ("train", "test"):
        table = loaded[split]
        columns = [table[column] for column in source.hub_text_columns]
        texts = [join_text(parts) for parts in zip(*columns, strict=True)]
        labels = [int(label) for label in table["label"]]
        report = {"path": f"hub:{source.hub_id}/{split}", "rows": len(texts), "kept": len(texts), "skipped": 0,
                  "reasons": {}, "examples": []}
        splits[split] = LabeledTexts(texts, labels, report)
    feature = loaded["train"].features.get("label")
    class_names = list(getattr(feature, "names", None) or source.class_names)
    return TextData(name, splits["train"], splits["test"], class_names, f"hub:{source.hub_id}")


def load_text_dataset(name: str, path=None, allow_hub: bool = True, skip_malformed: bool = False) -> TextData:
    """The training and test files of ``name`` ("ag_news" or "dbpedia_14"), from the first source that works.

    Local folders first (see ``resolve_dataset_dir``), then ``datasets.load_dataset`` on the hub when
    ``allow_hub`` is set and ``HF_HUB_OFFLINE`` is not set. When everything fails, one
    ``SourceNotFoundError`` (a FileNotFoundError) lists what was tried and how to provide the data.
    Tests pass ``allow_hub=False``.
    """
    source = _source(name)
    found = _find(name, path, allow_hub)
    if found.folder is not None:
        folder = found.folder
        class_names = _read_class_names(folder, source)
        train = read_original_csv(folder / "train.csv", len(class_names), skip_malformed=skip_malformed)
        test = read_original_csv(folder / "test.csv", len(class_names), skip_malformed=skip_malformed)
        return TextData(name, train, test, class_names, str(folder))
    if found.hub_id is not None:
        try:
            return _load_from_hub(name, source)
        except Exception as error:  # any failure (no network, no package, changed format) is reported below
            found = found.failed(f"{type(error).__name__}: {error}")
    raise found.error(
        f"could not find the {name} data set",
        f"set BAB_DATA_DIR to a folder containing {name}/train.csv and {name}/test.csv in the original CSV format "
        f"(no header; class id 1-based, title, body; optional classes.txt), or pass path= to that folder, or go "
        f"online so that the hub can be used")
