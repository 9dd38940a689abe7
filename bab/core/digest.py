"""``state_digest``: which weights exactly a model holds, as a SHA-256 of its state dict.

The run cache keys measurements of a model by this digest (``RunCache.measured``), and a notebook measures one
model many times (every text, every task, every policy). Hashing SmolLM2's 135 M parameters takes about half a
second, so the digest is remembered per model and recomputed only when its state may have changed. A tensor's
state may have changed when it is another tensor (a module attribute replaced), when its storage is another one
(``.data`` assigned), or when its version counter moved (every in-place write: an optimizer step, ``copy_``,
``load_state_dict``). The remembered entry holds each tensor's storage, so a storage freed by a ``.data``
assignment cannot be allocated again at the same address and pass for the old one. Inference tensors keep no
version counter; a model holding one is hashed every time. Writes that bypass torch (through a NumPy array sharing
a tensor's memory) move no version counter and are not seen.
"""

from __future__ import annotations

import hashlib
import weakref

import torch

# model -> (its seal: one entry per state tensor, the digest of the state the seal describes)
_REMEMBERED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[list[tuple], str]] = weakref.WeakKeyDictionary()


def state_digest(model: torch.nn.Module) -> str:
    """SHA-256 of a model's state dict (names, shapes, dtypes, values): which weights exactly.

    Computed once per state: a second call on the same, unchanged model returns the remembered digest."""
    state = sorted(model.state_dict(keep_vars=True).items())
    seal = _seal(state)
    remembered = _REMEMBERED.get(model)
    if seal is not None and remembered is not None and _same(remembered[0], seal):
        return remembered[1]
    digest = hashlib.sha256()
    for name, tensor in state:
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())  # no copy
    hexdigest = digest.hexdigest()
    if seal is not None:
        _REMEMBERED[model] = (seal, hexdigest)
    else:
        _REMEMBERED.pop(model, None)
    return hexdigest


def _seal(state: list[tuple[str, torch.Tensor]]) -> list[tuple] | None:
    """What must stay the same for the digest to hold: per tensor its name, the tensor object, its storage (held),
    offset, shape, strides, dtype and version counter; None when a tensor keeps no version counter."""
    seal = []
    for name, tensor in state:
        try:
            version = tensor._version
        except RuntimeError:  # an inference tensor: in-place writes to it leave no trace
            return None
        seal.append((name, tensor, tensor.untyped_storage(), tensor.storage_offset(), tuple(tensor.shape),
                     tensor.stride(), tensor.dtype, version))
    return seal


def _same(before: list[tuple], now: list[tuple]) -> bool:
    return len(before) == len(now) and all(
        name == name_now and tensor is tensor_now and storage.data_ptr() == storage_now.data_ptr()
        and layout == layout_now
        for (name, tensor, storage, *layout), (name_now, tensor_now, storage_now, *layout_now)
        in zip(before, now, strict=False))  # unequal lengths are answered by the length test first
