"""Repository-level pytest hooks: nbval skips a notebook whose data cannot be resolved here.

DESIGN.md: "Notebooks whose data cannot be resolved are skipped with the reason, not failed."
"""

import os
from pathlib import Path

import pytest

# notebook file name -> data sets it reads (resolved as bab.data.text.resolve_dataset_dir does)
NOTEBOOK_DATA = {
    "02_ag_news_custom.ipynb": ("ag_news",),
    "03_bert_ag_news.ipynb": ("ag_news",),
    "04_dbpedia_bert.ipynb": ("dbpedia_14", "ag_news"),  # the gate-ranking analysis uses both
}


def _missing_data(notebook: str) -> str | None:
    from bab.data.text import resolve_dataset_dir

    for name in NOTEBOOK_DATA.get(notebook, ()):
        if resolve_dataset_dir(name) is None:
            where = os.environ.get("BAB_DATA_DIR", "<unset>")
            return f"{name} not found (BAB_DATA_DIR={where}); set BAB_DATA_DIR to a folder with {name}/train.csv"
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
