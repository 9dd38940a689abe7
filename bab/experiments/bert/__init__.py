"""Notebooks 03 and 04's study: budgeted heads on a pretrained Hugging Face encoder (budgeted-attention paper,
section 6.5, Tables 5-10), on AG News (03) and DBpedia14 (04).

The same steps as the custom AG News study (``bab.experiments.text``: dense fine-tune, warm-start budgeted gates,
static specialists, hard adaptation, sweeps) on a BERT-family encoder, plus what only a pretrained encoder needs:
structural pruning into a smaller model (saved, reloaded and timed against the unpruned model in the same process),
the compute analysis, and the validation-ranked dense post-hoc structural baseline with and without one recovery
epoch. Notebook 03 also reports the DistilBERT pilot of section 6.5 (hub only).

Modules: ``profiles`` (``BertProfile``, ``BERT_AG_NEWS``, ``BERT_DBPEDIA``), ``study`` (``BertStudy``, the declared
rows of both notebooks and the pilot, ``kept_heads_table``), ``analysis`` (``paper_shape_pruned``: the compute
analysis on BERT-Mini's shape).
"""

from bab.experiments.bert.analysis import BERT_MINI_SHAPE, paper_shape_pruned
from bab.experiments.bert.profiles import BERT_AG_NEWS, BERT_DBPEDIA, BertProfile
from bab.experiments.bert.study import (
    BERT_AG_NEWS_METHODS,
    BERT_DBPEDIA_METHODS,
    METHOD_SETS,
    PILOT_EXPERIMENT,
    PILOT_METHODS,
    BertStudy,
    kept_heads_table,
    pilot_unavailable_row,
)

__all__ = ["BERT_AG_NEWS", "BERT_AG_NEWS_METHODS", "BERT_DBPEDIA", "BERT_DBPEDIA_METHODS", "BERT_MINI_SHAPE",
           "METHOD_SETS", "PILOT_EXPERIMENT", "PILOT_METHODS", "BertProfile", "BertStudy", "kept_heads_table",
           "paper_shape_pruned", "pilot_unavailable_row"]
