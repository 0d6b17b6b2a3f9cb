"""Streaming checkpoint tensors into qformats' checkpoint writer.

Tensors are described as an ordered list of :class:`TensorEntry` (name, size, loader); the loader runs
only when the writer reaches that tensor, so at most one shard's tensors are in memory. qformats'
writer takes numpy arrays: bfloat16 tensors (``TensorEntry.bf16``) are handed over as float32 and named
in the ``dtypes`` map (:func:`bf16_names`) so that they are stored as bfloat16 again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

TensorLoader = Callable[[], "torch.Tensor | np.ndarray"]


@dataclass(frozen=True)
class TensorEntry:
    """One tensor to write: its checkpoint ``name``, size in bytes and a loader called at write time."""

    name: str
    nbytes: int
    load: TensorLoader
    bf16: bool = False


def bf16_names(entries: Sequence[TensorEntry]) -> dict[str, str]:
    """The writer's ``dtypes`` map: ``"BF16"`` for every bfloat16 entry."""
    return {e.name: "BF16" for e in entries if e.bf16}


def numpy_stream(entries: Sequence[TensorEntry]) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, array)`` pairs, loading each tensor on demand (bfloat16 handed over as float32)."""
    for entry in entries:
        value = entry.load()
        if isinstance(value, torch.Tensor):
            value = value.detach().to("cpu")
            if value.dtype == torch.bfloat16:
                if not entry.bf16:
                    raise ValueError(f"tensor {entry.name!r} is bfloat16 but its entry does not say so")
                value = value.to(torch.float32)
            value = value.contiguous().numpy()
        yield entry.name, np.asarray(value, order="C")  # (ascontiguousarray would make a 0-d scale 1-d)


def write_atomic_json(path: Path, data: object) -> None:
    """Write ``data`` as indented JSON through a temporary name and an atomic rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
