"""Notebook 02's study: budgeted attention on a text-classification data set (budgeted-attention paper, sections
6.3-6.4), and the base of notebooks 03 and 04's pretrained-encoder study (``bab.experiments.bert``).

The data are the original CSV files (AG News, DBpedia14) resolved as in docs/data-and-models.md; train and
validation come from the training file, the held-out test split from the test file. Checkpoints
are selected on validation; results are reported on test. The training steps are the shared ones of
``bab.experiments.pipelines.heads.BudgetedStudy``, each cached by its whole lineage.

Modules: ``profiles`` (``TextProfile``, ``AG_NEWS``, ``length_grouped``), ``study`` (``TextStudy``, the declared rows
``AG_NEWS_METHODS``, ``ag_news_rows``, ``real_text_batches``).
"""

from bab.experiments.text.profiles import AG_NEWS, TextProfile, length_grouped
from bab.experiments.text.study import AG_NEWS_METHODS, METHOD_SETS, TextStudy, ag_news_rows, real_text_batches

__all__ = ["AG_NEWS", "AG_NEWS_METHODS", "METHOD_SETS", "TextProfile", "TextStudy", "ag_news_rows", "length_grouped",
           "real_text_batches"]
