"""Lazy reads of named tensors from safetensors files (one open handle per file, memory-mapped)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import SourceFormatError

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_DTYPE_BYTES.update({"F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8})

_TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


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

    def nbytes(self, name: str) -> int:
        """Size of tensor ``name`` in its file dtype, read from the header (no data loaded)."""
        file = self._map.get(name)
        if file is None:
            raise SourceFormatError(f"tensor {name!r} is not in any weight file of the source")
        piece = self._handle(file).get_slice(name)  # type: ignore[attr-defined]
        count = 1
        for dim in piece.get_shape():
            count *= int(dim)
        return count * _DTYPE_BYTES.get(str(piece.get_dtype()).upper(), 4)

    def dtype(self, name: str) -> torch.dtype:
        """The torch dtype tensor ``name`` is stored in (from the header)."""
        file = self._map.get(name)
        if file is None:
            raise SourceFormatError(f"tensor {name!r} is not in any weight file of the source")
        code = str(self._handle(file).get_slice(name).get_dtype()).upper()  # type: ignore[attr-defined]
        return _TORCH_DTYPES.get(code, torch.float32)

    def close(self) -> None:
        self._handles.clear()

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
