"""A GGUF decoder's float32 copy in the run cache: the GGUF file is read once per machine, not once per process.

transformers reads a GGUF file through the gguf package: it parses the file's metadata three times (config,
tokenizer, weights) and dequantises every tensor in NumPy, 20 to 30 s for SmolLM2-135M on one core, in every
process that loads it (each notebook kernel, each ``python -m bab train 07`` run, the tests). What it builds is a
float32 transformers model and a fast tokenizer. ``save_copy`` writes those (``model.safetensors``, ``config.json``,
``generation_config.json``, the tokenizer files) to ``<cache root>/converted/<file stem>-<key>/``, and
``load_copy`` reads them back in about a second: the same weights bit for bit, the same config (its GGUF
quantization entry included, so transformers marks the model as it marks one read from GGUF) and the same
tokenizer. The key hashes the file's bytes and the transformers version (another version may convert otherwise),
so a changed file or library converts again. A copy is written into a temporary folder and renamed into place:
processes converting at once each write one, and the first rename wins.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import transformers
from safetensors.torch import save_model

from bab.core.folders import share
from bab.core.runs import CONVERTED, default_cache_root

KEY_FILE_CHUNK = 1 << 24  # hash the file in 16 MB reads


def copy_folder(gguf: str | Path, root: str | Path | None = None) -> Path:
    """Where the copy of ``gguf`` lives (or would): ``<root>/converted/<stem>-<16 hex digits>``."""
    gguf = Path(gguf)
    digest = hashlib.sha256(f"transformers {transformers.__version__}\n".encode())
    with open(gguf, "rb") as handle:
        while chunk := handle.read(KEY_FILE_CHUNK):
            digest.update(chunk)
    return Path(root or default_cache_root()) / CONVERTED / f"{gguf.stem}-{digest.hexdigest()[:16]}"


def load_copy(folder: Path, gguf: str | Path):
    """(model in eval mode, tokenizer) from ``folder`` (``copy_folder(gguf)``), or None when no copy is there yet.
    The model and tokenizer name the GGUF file's folder as where they came from, as when read from the file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "model.safetensors").is_file():
        return None
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model.config._name_or_path = tokenizer.name_or_path = str(Path(gguf).parent)
    return model.eval(), tokenizer


def save_copy(model, tokenizer, folder: Path) -> Path:
    """Write ``model`` and ``tokenizer``, as transformers read them from a GGUF file, to ``folder``
    (``copy_folder(gguf)``); a copy already there is kept."""
    if (folder / "model.safetensors").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model.config.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        save_model(model, str(staging / "model.safetensors"))  # tied embeddings once, as save_pretrained would
        tokenizer.save_pretrained(staging)
        share(staging)  # others on the machine may load it too
        try:
            staging.rename(folder)
        except OSError:  # another process renamed its copy into place first
            if not (folder / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
