"""Tokenizers for text classification: words with a vocabulary fitted on the training split, or a pretrained one.

The word vocabulary is fitted on the training split only, so no information about validation or test
texts leaks into the model's input space. Both tokenizers clean the text first (``clean_text``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from bab.data.text.readers import clean_text

PAD, CLS, UNK = 0, 1, 2
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[UNK]")
# a word: letters and digits, with at most one inner apostrophe ("don't")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


class WordTokenizer:
    """Lower-cased words of the cleaned text; ids 0 = [PAD], 1 = [CLS], 2 = [UNK], then words.

    The vocabulary is fitted on the training split only and ordered by frequency (ties alphabetically),
    so the same texts give the same ids anywhere. ``pad_id`` 0 matches ``EncoderConfig.pad_id``.
    """

    pad_id, cls_id, unk_id = PAD, CLS, UNK
    specials_per_sequence = 1  # [CLS]

    def __init__(self, words: Sequence[str]):
        words = list(words)
        duplicates = [word for word, n in Counter(words).items() if n > 1]
        if duplicates or any(word in SPECIAL_TOKENS for word in words):
            raise ValueError(f"WordTokenizer words must be unique and exclude {SPECIAL_TOKENS}; "
                             f"found duplicates/specials {duplicates[:5] or [w for w in words if w in SPECIAL_TOKENS]}")
        self.itos = [*SPECIAL_TOKENS, *words]
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @staticmethod
    def tokenize(text: str) -> list[str]:
        text = clean_text(text).lower().replace("\u2019", "'")
        return _WORD.findall(text)

    @classmethod
    def fit(cls, texts: Sequence[str], max_vocab: int = 20_000, min_freq: int = 2) -> WordTokenizer:
        """Vocabulary of the words seen at least ``min_freq`` times; ``max_vocab`` bounds ``vocab_size``
        (the three special tokens included), keeping the most frequent words."""
        if max_vocab <= len(SPECIAL_TOKENS):
            raise ValueError(f"max_vocab must exceed the {len(SPECIAL_TOKENS)} special tokens, got {max_vocab}")
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts = Counter()
        for text in texts:
            counts.update(cls.tokenize(text))
        ranked = sorted((item for item in counts.items() if item[1] >= min_freq), key=lambda item: (-item[1], item[0]))
        return cls([word for word, _ in ranked[:max_vocab - len(SPECIAL_TOKENS)]])

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, texts: str | Sequence[str], max_len: int) -> torch.Tensor:
        """LongTensor [N, max_len]: [CLS], then word ids (unknown words as [UNK]), truncated, right-padded with 0."""
        if max_len < 2:
            raise ValueError(f"max_len must be at least 2 ([CLS] and one word), got {max_len}")
        if isinstance(texts, str):
            texts = [texts]
        ids = np.full((len(texts), max_len), PAD, dtype=np.int64)
        ids[:, 0] = CLS
        get = self.stoi.get
        for row, text in enumerate(texts):
            tokens = [get(word, UNK) for word in self.tokenize(text)[:max_len - 1]]
            ids[row, 1:1 + len(tokens)] = tokens
        return torch.from_numpy(ids)

    def decode(self, ids) -> str:
        """The tokens of one sequence, padding left out (for inspecting examples)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return " ".join(self.itos[i] for i in ids if i != PAD)

    def to_dict(self) -> dict:
        return {"type": "WordTokenizer", "specials": list(SPECIAL_TOKENS), "words": self.itos[len(SPECIAL_TOKENS):]}

    @classmethod
    def from_dict(cls, data: dict) -> WordTokenizer:
        if data.get("type") != "WordTokenizer" or list(data.get("specials", [])) != list(SPECIAL_TOKENS):
            raise ValueError(f"not a saved WordTokenizer with specials {SPECIAL_TOKENS}: keys {sorted(data)}")
        return cls(data["words"])


class PretrainedTokenizer:
    """A Hugging Face tokenizer (e.g. BERT's WordPiece) behind the WordTokenizer interface.

    ``encode`` gives [CLS] ... [SEP] ids, truncated and right-padded to ``max_len`` as the paper's
    BERT protocol does (padding="max_length"). Nothing is fitted: the vocabulary is the model's.
    """

    def __init__(self, hf_tokenizer, name: str = ""):
        if hf_tokenizer.pad_token_id is None:
            raise ValueError(f"tokenizer {name or hf_tokenizer.name_or_path!r} has no padding token; set one first")
        self.hf = hf_tokenizer
        self.name = name or hf_tokenizer.name_or_path
        self.pad_id = hf_tokenizer.pad_token_id
        self.unk_id = hf_tokenizer.unk_token_id
        self.specials_per_sequence = hf_tokenizer.num_special_tokens_to_add()

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, texts: str | Sequence[str], max_len: int) -> torch.Tensor:
        if max_len < self.specials_per_sequence + 1:
            raise ValueError(f"max_len must leave room for a word after the special tokens, got {max_len}")
        texts = [texts] if isinstance(texts, str) else [clean_text(t) for t in texts]
        return self.hf(list(texts), padding="max_length", truncation=True, max_length=max_len,
                       return_tensors="pt")["input_ids"]

    def count_truncated(self, texts: Sequence[str], max_len: int) -> int:
        """How many of ``texts`` ``encode`` cuts short: more than ``max_len`` tokens, the special tokens included."""
        lengths = self.hf([clean_text(t) for t in texts], truncation=False, verbose=False)["input_ids"]
        return sum(len(ids) > max_len for ids in lengths)

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.hf.decode(ids, skip_special_tokens=True)


