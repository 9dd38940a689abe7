"""Language-model text: source resolution, a held-out split by contiguous blocks, a BPE tokenizer.

Sources (docs/data-and-models.md), tried in order by the one resolver of ``bab.core.sources``: an
explicit ``path`` (a .txt file or a folder of .txt files), then ``$BAB_DATA_DIR/lm/*.txt``, then
WikiText-2 through Hugging Face ``datasets`` (online users only). When all fail, one
``SourceNotFoundError`` (a FileNotFoundError) says what was tried and how to provide the text.

Split: the paragraphs (lines) of each file are cut into contiguous blocks of ``block_lines``
lines; a seeded choice sends ``val_fraction`` of the blocks to validation. Whole blocks move, so
no sentence is shared by the two splits. The tokenizer is fitted on the training split only.

Tokenizers: ``"bpe"`` trains a byte-level BPE (the ``tokenizers`` library, GPT-2's scheme) of
``vocab_size`` tokens on the training text; ``"gpt2"`` loads GPT-2's own (needs the hub);
``"pretrained"`` uses the tokenizer of a pretrained model, passed to ``load_lm_data(tokenizer=...)``
(``LMTokenizer.from_hf`` wraps a Hugging Face fast tokenizer; notebook 07's SmolLM2).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from bab.core.sources import Found, Place, find_source, standard_places

TOKENIZERS = ("bpe", "gpt2", "pretrained")
END_OF_TEXT = "<|endoftext|>"


@dataclass(frozen=True)
class LMDataConfig:
    files: tuple[str, ...] = ("austen.txt",)  # which *.txt of the source folder; () = all of them
    max_chars: int | None = None  # use only the first max_chars characters of each file (smoke runs)
    val_fraction: float = 0.1
    block_lines: int = 40  # paragraphs per contiguous block of the split
    tokenizer: str = "bpe"
    vocab_size: int = 4096  # of the trained BPE
    seed: int = 13

    def __post_init__(self):
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {self.tokenizer!r}; choose one of {TOKENIZERS}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {self.val_fraction}")
        if self.block_lines < 1 or self.vocab_size < 260:
            raise ValueError("block_lines must be >= 1 and vocab_size >= 260 (256 bytes + specials)")
        if self.max_chars is not None and self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1 or None, got {self.max_chars}")


# ---------------------------------------------------------------------------------------- sources


def _txt_files(folder: Path, files: tuple[str, ...]) -> list[Path]:
    if files:
        return [folder / name for name in files if (folder / name).is_file()]
    return sorted(folder.glob("*.txt"))


def _find_folder(path, files: tuple[str, ...]) -> Found:
    """The first folder holding ``files`` (all .txt files when empty), and what was tried."""
    wanted = list(files) or "*.txt"
    # WikiText-2 is tried even when HF_HUB_OFFLINE is set: ``datasets`` may still have it in its cache
    hub = Place("Hugging Face hub wikitext-2-raw-v1", hub_id="wikitext")
    found = find_source(standard_places(path, "lm", hub=hub), lambda folder: _complete(folder, files), str(wanted))
    if path is not None:
        found.require(f"path={str(path)!r} is neither a .txt file nor a folder with {wanted} (directly or under lm/)",
                      "pass a .txt file, or a folder of .txt files")
    return found


def _complete(folder: Path, files: tuple[str, ...]) -> bool:
    found = _txt_files(folder, files) if folder.is_dir() else []
    return bool(found) and (not files or len(found) == len(files))


def _local_files(path, files: tuple[str, ...]) -> tuple[list[Path] | None, Found | None]:
    """(the local .txt files to read or None, the search that found them; None for an explicit .txt file)."""
    if path is not None and Path(path).expanduser().is_file():
        return [Path(path).expanduser()], None
    found = _find_folder(path, files)
    return (_txt_files(found.folder, files) if found.folder is not None else None), found


def resolve_lm_files(path=None, files: tuple[str, ...] = ()) -> tuple[list[Path] | None, list[str]]:
    """(the local .txt files to read or None, what was tried)."""
    local, found = _local_files(path, files)
    return local, list(found.tried) if found is not None else []


def lm_data_available(path=None, files: tuple[str, ...] = ()) -> bool:
    """True when the text can be read locally (what nbval's skip check asks)."""
    return resolve_lm_files(path, files)[0] is not None


def read_lm_lines(config: LMDataConfig, path=None) -> tuple[list[list[str]], str]:
    """The non-empty lines of every source file (one list per file) and a description of the source."""
    files, found = _local_files(path, config.files)
    if files is not None:
        per_file = []
        for file in files:
            text = file.read_text(encoding="utf-8")
            if config.max_chars is not None:
                text = text[: config.max_chars]
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if not lines:
                raise ValueError(f"{file} holds no text")
            per_file.append(lines)
        return per_file, ", ".join(str(f) for f in files)
    try:  # online users: WikiText-2 (raw) from the Hugging Face hub
        from datasets import load_dataset

        wiki = load_dataset("wikitext", "wikitext-2-raw-v1", split="train")
        lines = [t.strip() for t in wiki["text"] if t.strip() and not t.strip().startswith("=")]
        if config.max_chars is not None:
            lines = _truncate(lines, config.max_chars)
        return [lines], "Hugging Face hub: wikitext-2-raw-v1 (train)"
    except Exception as exc:  # noqa: BLE001 - any failure means the hub is not reachable
        found = found.failed(f"{type(exc).__name__}: {str(exc)[:120]}")
    raise found.error("could not find language-model text",
                      "pass path=<a .txt file or folder>, or set BAB_DATA_DIR to a folder with lm/*.txt")


def _truncate(lines: list[str], max_chars: int) -> list[str]:
    out, total = [], 0
    for line in lines:
        if total >= max_chars:
            break
        out.append(line[: max_chars - total])
        total += len(out[-1])
    return out


def split_blocks(per_file: list[list[str]], config: LMDataConfig) -> tuple[list[str], list[str]]:
    """(train lines, validation lines): contiguous blocks of ``block_lines`` lines, a seeded share to validation."""
    blocks = [lines[i: i + config.block_lines] for lines in per_file for i in range(0, len(lines), config.block_lines)]
    if len(blocks) < 2:
        raise ValueError(f"the text has {len(blocks)} block(s) of {config.block_lines} lines; need at least 2 to "
                         "hold out a validation split (use more text or a smaller block_lines)")
    num_val = max(1, round(config.val_fraction * len(blocks)))
    val_ids = set(random.Random(config.seed).sample(range(len(blocks)), num_val))
    train = [line for i, block in enumerate(blocks) if i not in val_ids for line in block]
    val = [line for i, block in enumerate(blocks) if i in val_ids for line in block]
    return train, val


# ---------------------------------------------------------------------------------------- tokenizer


class LMTokenizer:
    """encode / decode / vocab_size over a ``tokenizers.Tokenizer`` (trained BPE or GPT-2's)."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self.name = name
        self.eot_id = tokenizer.token_to_id(END_OF_TEXT)
        if self.eot_id is None:
            raise ValueError(f"tokenizer {name!r} has no {END_OF_TEXT} token, which separates the paragraphs of the "
                             "token stream; use a tokenizer that has one")

    @classmethod
    def from_hf(cls, hf_tokenizer, name: str) -> LMTokenizer:
        """Wrap a Hugging Face fast tokenizer (its ``backend_tokenizer`` is a ``tokenizers.Tokenizer``)."""
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(f"{type(hf_tokenizer).__name__} is not a fast tokenizer (no backend_tokenizer); load it "
                             "with AutoTokenizer.from_pretrained(..., use_fast=True)")
        return cls(backend, name)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def encode_lines(self, lines: list[str]) -> list[int]:
        """One id stream: every line (paragraph) followed by the end-of-text token."""
        ids = []
        for enc in self.tokenizer.encode_batch(lines):
            ids.extend(enc.ids)
            ids.append(self.eot_id)
        return ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))

    def token_strings(self, ids) -> list[str]:
        """The text of each token on its own (for the dropped-token view)."""
        return [self.tokenizer.decode([i]) for i in ids]


def build_tokenizer(name: str, train_lines: list[str] | None = None, vocab_size: int = 4096) -> LMTokenizer:
    """``"bpe"``: byte-level BPE trained on ``train_lines``; ``"gpt2"``: GPT-2's tokenizer from the hub."""
    if name == "bpe":
        from tokenizers import ByteLevelBPETokenizer

        if not train_lines:
            raise ValueError("the 'bpe' tokenizer is trained on the training text: pass train_lines")
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(train_lines, vocab_size=vocab_size, min_frequency=2,
                                special_tokens=[END_OF_TEXT], show_progress=False)
        return LMTokenizer(bpe, "bpe")
    if name == "gpt2":
        from tokenizers import Tokenizer

        try:
            return LMTokenizer(Tokenizer.from_pretrained("gpt2"), "gpt2")
        except Exception as exc:  # noqa: BLE001 - offline: say what to do instead
            raise FileNotFoundError(f"GPT-2's tokenizer could not be fetched from the Hugging Face hub ({exc}); "
                                    "offline, use tokenizer='bpe' (trained on the training text)") from exc
    if name == "pretrained":
        raise ValueError("tokenizer 'pretrained' is the pretrained model's own: pass it as "
                         "load_lm_data(config, tokenizer=LMTokenizer.from_hf(hf_tokenizer, name))")
    raise ValueError(f"unknown tokenizer {name!r}; choose one of {TOKENIZERS}")


# ---------------------------------------------------------------------------------------- data set


@dataclass
class LMData:
    tokenizer: LMTokenizer
    train_ids: torch.Tensor  # [N_train] long, the whole training stream
    val_ids: torch.Tensor  # [N_val]
    info: dict
    val_lines: list[str] = field(default_factory=list, repr=False)  # the held-out paragraphs, as text

    def windows(self, split: str, context: int, max_windows: int | None = None) -> TensorDataset:
        """Non-overlapping windows of ``context + 1`` tokens -> (inputs [N, context], targets [N, context])."""
        return TensorDataset(*lm_windows(self.split_ids(split), context, max_windows))

    def split_ids(self, split: str) -> torch.Tensor:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return self.train_ids if split == "train" else self.val_ids


def lm_windows(ids: torch.Tensor, context: int, max_windows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    n = (len(ids) - 1) // context
    if n < 1:
        raise ValueError(f"a stream of {len(ids)} tokens is too short for one window of {context} + 1 tokens")
    if max_windows is not None:
        n = min(n, max_windows)
    x = ids[: n * context].view(n, context)
    y = ids[1: n * context + 1].view(n, context)
    return x, y


def load_lm_data(config: LMDataConfig = LMDataConfig(), path=None, tokenizer: LMTokenizer | None = None) -> LMData:
    """Read, split by blocks, fit the tokenizer on train (or use ``tokenizer``), tokenize both splits.

    ``tokenizer``: a ready tokenizer (a pretrained model's), required by and only allowed with
    ``config.tokenizer == "pretrained"``.
    """
    if (tokenizer is not None) != (config.tokenizer == "pretrained"):
        raise ValueError("pass tokenizer=... exactly when LMDataConfig.tokenizer is 'pretrained' "
                         f"(got tokenizer={config.tokenizer!r} and {'a' if tokenizer is not None else 'no'} tokenizer)")
    per_file, source = read_lm_lines(config, path)
    train_lines, val_lines = split_blocks(per_file, config)
    if tokenizer is None:
        tokenizer = build_tokenizer(config.tokenizer, train_lines, config.vocab_size)
    train_ids = torch.tensor(tokenizer.encode_lines(train_lines), dtype=torch.long)
    val_ids = torch.tensor(tokenizer.encode_lines(val_lines), dtype=torch.long)
    info = {"source": source, "train_lines": len(train_lines), "val_lines": len(val_lines),
            "train_tokens": len(train_ids), "val_tokens": len(val_ids), "vocab_size": tokenizer.vocab_size}
    return LMData(tokenizer, train_ids, val_ids, info, val_lines)
