"""The dtype of a checkpoint's dense (non-quantized) tensors and of its ``config.json`` ``dtype``.

``auto`` keeps the source's precision: a ``.gguf`` source (blocks dequantized to float32 in memory) is
written as float16, the dtype llama.cpp's own converters give dense tensors; a Hugging Face source is
written in the dtype its ``config.json`` declares (``dtype`` or the older ``torch_dtype``), else in the
stored dtype of its first floating tensor. ``float16``, ``bfloat16`` and ``float32`` force that dtype.
Quantized modules are not affected: their layout fixes the dtype of scales and codes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from qformats.enums import FORMAT
from torch import nn

from ..errors import QHFError

if TYPE_CHECKING:
    from ..source.opened_source import OpenedSource

AUTO = "auto"
DENSE_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}
DTYPE_CHOICES = (AUTO, *DENSE_DTYPES)
GGUF_DENSE_DTYPE = torch.float16


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"`` (the spelling of ``config.json``)."""
    for name, value in DENSE_DTYPES.items():
        if value == dtype:
            return name
    raise QHFError(f"dense dtype {dtype}: expected one of {', '.join(DENSE_DTYPES)}")


def _declared(directory: Path) -> torch.dtype | None:
    """The dtype ``config.json`` declares, read from the file: building the meta skeleton rewrites the
    in-memory config's ``dtype`` to the compute dtype."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    for key in ("dtype", "torch_dtype"):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, str) and value in DENSE_DTYPES:
            return DENSE_DTYPES[value]
    return None


def resolve_dense_dtype(source: OpenedSource, requested: str | torch.dtype = AUTO) -> torch.dtype:
    """The dense dtype to write for ``source`` given ``requested`` (see module doc)."""
    if isinstance(requested, torch.dtype):
        dtype_name(requested)  # validates
        return requested
    if requested != AUTO:
        if requested not in DENSE_DTYPES:
            raise QHFError(f"dtype {requested!r}: expected one of {', '.join(DTYPE_CHOICES)}")
        return DENSE_DTYPES[requested]
    if source.kind == FORMAT.GGUF.value:  # a .gguf file
        return GGUF_DENSE_DTYPE
    declared = _declared(Path(source.path))
    if declared is not None:
        return declared
    for name in source.tensor_names():
        stored = source.stored_dtype(name)
        if stored.is_floating_point and stored in DENSE_DTYPES.values():
            return stored
    return torch.float32


def round_to_dense_dtype(model: nn.Module, names: Iterable[str], dtype: torch.dtype) -> int:
    """Round the in-memory floating tensors ``names`` of ``model`` to ``dtype``'s precision, in place
    (their storage dtype is kept), so the model equals what the checkpoint holds; returns how many changed.

    Verify-after-save then compares the reloaded checkpoint with exactly the model that was written.
    """
    changed = 0
    for name in names:
        module_name, _, pname = name.rpartition(".")
        try:
            module = model.get_submodule(module_name) if module_name else model
        except AttributeError:
            continue
        value: torch.Tensor | None = module._parameters.get(pname)
        if value is None:
            value = module._buffers.get(pname)
        if value is None or value.device.type == "meta" or not value.is_floating_point() or value.dtype == dtype:
            continue
        round_in_place(value, dtype)
        changed += 1
    return changed


#: elements :func:`round_in_place` converts at a time (16 MiB of float32)
ROUND_CHUNK = 4 * 2**20


def round_in_place(value: torch.Tensor, dtype: torch.dtype) -> None:
    """``value.copy_(value.to(dtype).to(value.dtype))``, :data:`ROUND_CHUNK` elements at a time: the same values
    (the rounding is elementwise) without two converted copies of the whole tensor at once (a bfloat16 8B
    model's embeddings and head are 1 GB each, whose two copies had set a streaming run's peak)."""
    with torch.no_grad():
        flat = value.view(-1) if value.is_contiguous() else None
        if flat is None:
            value.copy_(value.to(dtype).to(value.dtype))
            return
        for start in range(0, flat.numel(), ROUND_CHUNK):
            part = flat[start : start + ROUND_CHUNK]
            part.copy_(part.to(dtype).to(value.dtype))
