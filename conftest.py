"""Repository-level pytest hooks: nbval skips a notebook whose data cannot be resolved here.

DESIGN.md: "Notebooks whose data cannot be resolved are skipped with the reason, not failed."
"""

import os
from pathlib import Path

import pytest

# notebook file name -> data sets it reads
NOTEBOOK_DATA = {
    "02_ag_news_custom.ipynb": ("ag_news",),
    "03_bert_ag_news.ipynb": ("ag_news",),
    "04_dbpedia_bert.ipynb": ("dbpedia_14", "ag_news"),  # the gate-ranking analysis uses both
    "05_vit_sparsifiner.ipynb": ("fashion_mnist",),
}


def _resolve(name: str):
    """The local folder of a data set, or None (as the loaders resolve it, without the online hub)."""
    if name == "fashion_mnist":
        from bab.data.images import resolve_image_dir

        return resolve_image_dir()[0]
    from bab.data.text import resolve_dataset_dir

    return resolve_dataset_dir(name)


def _missing_data(notebook: str) -> str | None:
    what = {"fashion_mnist": "fashion_mnist/ with the four IDX files"}
    for name in NOTEBOOK_DATA.get(notebook, ()):
        if _resolve(name) is None:
            where = os.environ.get("BAB_DATA_DIR", "<unset>")
            files = what.get(name, f"{name}/train.csv")
            return f"{name} not found (BAB_DATA_DIR={where}); set BAB_DATA_DIR to a folder with {files}"
    return None


def pytest_collection_modifyitems(config, items):
    reasons = {}
    for item in items:
        name = Path(str(item.fspath)).name
        if name in NOTEBOOK_DATA:
            if name not in reasons:
                reasons[name] = _missing_data(name)
            if reasons[name]:
                item.add_marker(pytest.mark.skip(reason=reasons[name]))
