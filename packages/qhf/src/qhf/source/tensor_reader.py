"""Lazy reads of named tensors from safetensors files (one open handle per file, memory-mapped)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import SourceFormatError


class TensorReader:
    """Reads tensors by name on demand. ``weight_map``: tensor name -> safetensors file.

    ``get(name, dtype)`` returns a fresh CPU tensor (copied out of the mapping, cast to ``dtype``).
    Use as a context manager, or call :meth:`close`, to release the file handles.
    """

    def __init__(self, weight_map: Mapping[str, Path]) -> None:
        self._map = dict(weight_map)
        self._handles: dict[Path, object] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._map))

    def _handle(self, file: Path) -> object:
        from safetensors import safe_open

        handle = self._handles.get(file)
        if handle is None:
            handle = safe_open(str(file), framework="pt")
            self._handles[file] = handle
        return handle

    def get(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        file = self._map.get(name)
        if file is None:
            raise SourceFormatError(f"tensor {name!r} is not in any weight file of the source")
        tensor = self._handle(file).get_tensor(name)  # type: ignore[attr-defined]
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        return tensor

    def close(self) -> None:
        self._handles.clear()

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
