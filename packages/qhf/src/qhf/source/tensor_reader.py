"""Lazy reads of named tensors from safetensors files, by plain file reads (no memory map).

Headers are parsed by qformats' :class:`~qformats.checkpoint.safetensors_io.SafetensorsFile` (which
checks byte ranges and names the file in its errors); each tensor is then read with one ``readinto``
straight into a fresh torch tensor of the stored dtype. A memory map would leave every page it touched
resident (and counted in the process's RSS) for as long as the file stays open; a read leaves only the
tensor, which the caller frees.

Every read is checked: the tensor's crc32, when the file records them (qformats' writer does), must match
the bytes read (a flipped byte in ``embed_tokens`` is refused naming the file and tensor), and a floating
tensor must hold no NaN/Inf (qformats' rule ``VALUE-DENSE``). Files are opened only after qformats'
regular-file check (a FIFO or device named as a shard is refused, never opened).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from qalgos.finite_check import all_finite
from qformats.checkpoint.dense_checks import DENSE_RULE
from qformats.checkpoint.safetensors_io import SafetensorsFile, TensorInfo, tensor_crc32
from qformats.errors import CheckpointFormatError
from qformats.file_access import open_regular

from ..errors import SourceFormatError

_CHECKED_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
}


class TensorReader:
    """Reads tensors by name on demand. ``weight_map``: tensor name -> safetensors file.

    ``get(name, dtype)`` returns a fresh CPU tensor (read from the file, cast to ``dtype`` when it is a
    floating tensor of another dtype). Use as a context manager, or call :meth:`close`, to drop the
    parsed headers.
    """

    def __init__(self, weight_map: Mapping[str, Path]) -> None:
        self._map = dict(weight_map)
        self._files: dict[Path, SafetensorsFile] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._map))

    def _info(self, name: str) -> tuple[Path, TensorInfo]:
        file = self._map.get(name)
        if file is None:
            raise SourceFormatError(f"tensor {name!r} is not in any weight file of the source")
        parsed = self._files.get(file)
        if parsed is None:
            try:
                parsed = SafetensorsFile(file)
            except CheckpointFormatError as exc:
                raise SourceFormatError(str(exc)) from exc
            self._files[file] = parsed
        info = parsed.tensors.get(name)
        if info is None:
            raise SourceFormatError(f"{file}: the index names tensor {name!r} but the file does not hold it")
        return file, info

    def get(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        file, info = self._info(name)
        expected = self._files[file].checksums.get(name)
        stored = _TORCH_DTYPES.get(info.dtype)
        if stored is None:
            raise SourceFormatError(f"{file}: tensor {name!r} has dtype {info.dtype}, which torch cannot hold")
        tensor = torch.empty(info.shape, dtype=stored)
        if info.nbytes:
            view = tensor.view(-1).view(torch.uint8).numpy()
            try:
                handle = open_regular(file)  # a file swapped for a FIFO is refused, never blocked on
            except CheckpointFormatError as exc:
                raise SourceFormatError(str(exc)) from None
            with handle:
                handle.seek(info.start)
                got = handle.readinto(view.data)
            if got != info.nbytes:
                raise SourceFormatError(f"{file}: tensor {name!r} is truncated ({got} of {info.nbytes} bytes read)")
            if expected is not None and tensor_crc32(info.dtype, info.shape, view) != expected:
                raise SourceFormatError(
                    f"{file}: tensor {name!r}: dtype, shape or bytes do not match the crc32 recorded when it was "
                    "written"
                )
        if tensor.dtype in _CHECKED_FLOATS and tensor.numel() and not all_finite(tensor):
            bad = int((~torch.isfinite(tensor)).sum())
            raise SourceFormatError(
                f"{file}: tensor {name!r}: [{DENSE_RULE}] expected finite values, found {bad} NaN/Inf"
            )
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        return tensor

    def nbytes(self, name: str) -> int:
        """Size of tensor ``name`` in its file dtype, read from the header (no data loaded)."""
        return int(self._info(name)[1].nbytes)

    def dtype(self, name: str) -> torch.dtype:
        """The torch dtype tensor ``name`` is stored in (from the header)."""
        return _TORCH_DTYPES.get(self._info(name)[1].dtype, torch.float32)

    def close(self) -> None:
        self._files.clear()

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
