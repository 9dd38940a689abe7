"""Text classification data: AG News and DBpedia14 (budgeted-attention paper, section 6.2).

One module per idea, every public name re-exported here (``from bab.data.text import X``):

- ``readers``: the CSV readers (original format and any CSV with a header), malformed rows, ``clean_text``;
- ``datasets``: the named data sets and where they come from (docs/data-and-models.md);
- ``splits``: the paper's stratified, seeded 10,000 / 2,000 / 2,000 splits (``make_splits``);
- ``tokenizers``: a word tokenizer fitted on the training split only, or a pretrained one;
- ``build``: all of it at once, as token-id tensors (``build_text_classification``).
"""

from bab.data.text.build import TextClassificationData, build_text_classification, sort_by_length
from bab.data.text.datasets import SOURCES, TextData, TextSource, load_text_dataset, resolve_dataset_dir
from bab.data.text.readers import LabeledTexts, clean_text, read_labeled_csv, read_original_csv
from bab.data.text.splits import PAPER_SPLIT_SIZES, Split, make_splits
from bab.data.text.tokenizers import CLS, PAD, SPECIAL_TOKENS, UNK, PretrainedTokenizer, WordTokenizer

__all__ = [
    "CLS", "PAD", "PAPER_SPLIT_SIZES", "SOURCES", "SPECIAL_TOKENS", "UNK", "LabeledTexts", "PretrainedTokenizer",
    "Split", "TextClassificationData", "TextData", "TextSource", "WordTokenizer", "build_text_classification",
    "clean_text", "load_text_dataset", "make_splits", "read_labeled_csv",
    "read_original_csv", "resolve_dataset_dir", "sort_by_length",
]
