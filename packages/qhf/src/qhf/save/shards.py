"""Safetensors shards and their index, written atomically.

Tensors are given as an ordered list of (name, nbytes, loader) so a shard's tensors are read only when
that shard is written: peak memory is one shard, not the model. Shard sizes use binary multipliers
(``"4GB"`` = 4 * 1024**3 bytes), as the reference does. One shard is written as ``model.safetensors``;
several as ``model-00001-of-0000N.safetensors`` plus ``model.safetensors.index.json`` with
``metadata.total_size`` and a sorted ``weight_map``. Stale shard files from an earlier save are removed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import QHFError

TensorLoader = Callable[[], "torch.Tensor | np.ndarray"]
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SHARD_RE = re.compile(r"^model(-\d{5}-of-\d{5})?\.safetensors$")


class DuplicateTensorError(QHFError, ValueError):
    """Two tensors of one checkpoint carry the same name."""


class ShardSizeError(QHFError, ValueError):
    """``max_shard_size`` is not a positive size such as ``"4GB"``, ``"500MB"`` or an int of bytes."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor to write: its checkpoint ``name``, size in bytes and a loader called at write time."""

    name: str
    nbytes: int
    load: TensorLoader


def parse_size(size: int | str) -> int:
    """Bytes in ``size`` (int, or text like ``"4GB"``, ``"512MiB"``, ``"10KB"``; binary multipliers)."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*", str(size).upper())
        if not match:
            raise ShardSizeError(f"max_shard_size: expected a size like '4GB' or a byte count, found {size!r}")
        value = int(float(match.group(1)) * _UNITS[match.group(2)])
    if value <= 0:
        raise ShardSizeError(f"max_shard_size: expected a positive size, found {size!r}")
    return value


def plan_shards(entries: Sequence[TensorEntry], max_bytes: int) -> list[list[TensorEntry]]:
    """Greedy split in order; a tensor larger than ``max_bytes`` gets a shard of its own."""
    shards: list[list[TensorEntry]] = [[]]
    used = 0
    for entry in entries:
        if shards[-1] and used + entry.nbytes > max_bytes:
            shards.append([])
            used = 0
        shards[-1].append(entry)
        used += entry.nbytes
    return [s for s in shards if s]


def _as_torch(value: torch.Tensor | np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
    return tensor.detach().to("cpu").contiguous()


def write_atomic_json(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_shards(
    directory: Path, entries: Sequence[TensorEntry], max_shard_size: int | str, metadata: dict[str, str] | None = None
) -> list[Path]:
    """Write ``entries`` into ``directory``; returns the shard paths. Duplicate names are an error."""
    from safetensors.torch import save_file

    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise DuplicateTensorError(f"checkpoint tensors named twice: {', '.join(dup[:5])}")
    shards = plan_shards(entries, parse_size(max_shard_size))
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta["format"] = "pt"
    total = len(shards)
    file_names = (
        ["model.safetensors"] if total == 1 else [f"model-{i + 1:05d}-of-{total:05d}.safetensors" for i in range(total)]
    )
    for stale in directory.iterdir():
        if _SHARD_RE.match(stale.name) and stale.name not in file_names:
            stale.unlink()
    index = directory / "model.safetensors.index.json"
    if total == 1 and index.exists():
        index.unlink()
    weight_map: dict[str, str] = {}
    total_size = 0
    paths = []
    for file_name, shard in zip(file_names, shards, strict=True):
        tensors = {e.name: _as_torch(e.load()) for e in shard}
        path = directory / file_name
        tmp = path.with_name(path.name + ".tmp")
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)
        paths.append(path)
        for name, tensor in tensors.items():
            weight_map[name] = file_name
            total_size += tensor.numel() * tensor.element_size()
        del tensors
    if total > 1:
        write_atomic_json(
            index, {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
        )
    return paths
