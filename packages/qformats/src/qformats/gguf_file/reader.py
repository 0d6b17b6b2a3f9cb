"""Read a native .gguf file: header, metadata key/values, tensor infos, and tensors by memory map.

Layout (little-endian): magic ``GGUF``, uint32 version (2 or 3), uint64 tensor count, uint64 metadata
count, the metadata key/values, the tensor infos (name, uint32 n_dims, uint64 dims innermost first,
uint32 ggml type, uint64 offset), padding to the alignment (``general.alignment``, default 32), then
the tensor data. Every count and size is checked against the bytes that remain before anything is
allocated, so a file that lies about its sizes gets a :class:`GGUFFileError` naming the field, not a
huge allocation. Tensor data is never copied until asked for: :meth:`GGUFReader.raw` returns a
read-only view of the mapped file.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UnsupportedLayoutError
from ..layouts.gguf.codec import decode_blocks
from ..layouts.gguf.types import GGMLType, ggml_type
from .errors import GGUFFileError
from .values import SCALAR_DTYPES, GGUFValue, ValueType

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset
_MIN_KV = 8 + 4 + 1  # empty key, value type, smallest value


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the file declares it. ``dims`` are ggml order (innermost first); ``shape`` is numpy
    order. ``offset`` is relative to the start of the data section; ``nbytes`` is its stored size."""

    name: str
    dims: tuple[int, ...]
    type: GGMLType
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))


class _Cursor:
    """Bounds-checked little-endian reads over the mapped file."""

    def __init__(self, buf: memoryview, path: str) -> None:
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path

    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, count: int, what: str) -> None:
        if count > self.remaining():
            raise GGUFFileError(
                f"{self.path}: {what} needs {count} bytes at offset {self.pos}, "
                f"but only {self.remaining()} remain (truncated file or a lying size)"
            )

    def unpack(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self, what: str) -> str:
        length = self.unpack("<Q", f"{what} length")
        self.need(length, f"{what} ({length} bytes)")
        raw = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFFileError(f"{self.path}: {what} is not valid UTF-8 ({exc.reason})") from None

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` length-prefixed UTF-8 strings (the hot loop of tokenizer vocabularies)."""
        buf, pos, size, unpack = self.buf, self.pos, self.size, struct.unpack_from
        out: list[str] = []
        try:
            for i in range(count):
                if size - pos < 8:
                    self.pos = pos
                    self.need(8, f"{what}[{i}] length")
                (length,) = unpack("<Q", buf, pos)
                pos += 8
                if length > size - pos:
                    self.pos = pos
                    self.need(length, f"{what}[{i}] ({length} bytes)")
                out.append(str(buf[pos : pos + length], "utf-8"))
                pos += length
        except UnicodeDecodeError as exc:
            raise GGUFFileError(f"{self.path}: {what}[{len(out)}] is not valid UTF-8 ({exc.reason})") from None
        self.pos = pos
        return out

    def value_type(self, what: str) -> ValueType:
        raw = self.unpack("<I", f"{what} type")
        try:
            return ValueType(raw)
        except ValueError:
            raise GGUFFileError(f"{self.path}: {what} has unknown value type {raw} (expected 0..12)") from None

    def scalar(self, vtype: ValueType, what: str) -> Any:
        dtype = SCALAR_DTYPES[vtype]
        self.need(dtype.itemsize, what)
        value = np.frombuffer(self.buf, dtype=dtype, count=1, offset=self.pos)[0]
        self.pos += dtype.itemsize
        if vtype == ValueType.BOOL:
            if value > 1:
                raise GGUFFileError(f"{self.path}: {what} is a bool stored as {int(value)} (expected 0 or 1)")
            return bool(value)
        return float(value) if dtype.kind == "f" else int(value)

    def value(self, what: str) -> GGUFValue:
        vtype = self.value_type(what)
        if vtype == ValueType.STRING:
            return GGUFValue(vtype, self.string(what))
        if vtype != ValueType.ARRAY:
            return GGUFValue(vtype, self.scalar(vtype, what))
        etype = self.value_type(f"{what} element")
        count = self.unpack("<Q", f"{what} array count")
        if etype == ValueType.ARRAY:
            raise GGUFFileError(f"{self.path}: {what} is an array of arrays (not supported)")
        if etype == ValueType.STRING:
            self.need(count * 8, f"{what} ({count} strings)")
            return GGUFValue(vtype, self.strings(count, what), etype)
        dtype = SCALAR_DTYPES[etype]
        self.need(count * dtype.itemsize, f"{what} ({count} x {etype.name})")
        array = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
        self.pos += count * dtype.itemsize
        return GGUFValue(vtype, array, etype)


class GGUFReader:
    """A parsed .gguf file. ``metadata`` maps keys to :class:`GGUFValue`; ``tensors`` maps names to
    :class:`TensorInfo` in file order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        size = Path(self.path).stat().st_size
        if size < 24:
            raise GGUFFileError(f"{self.path}: {size} bytes is shorter than the 24-byte GGUF header")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(memoryview(self._map.view(np.ndarray)), self.path)  # type: ignore[arg-type]
        self._parse(cur)

    def _parse(self, cur: _Cursor) -> None:
        magic = bytes(cur.buf[:4])
        if magic != MAGIC:
            raise GGUFFileError(f"{self.path}: bad magic {magic!r} (expected {MAGIC!r}); not a GGUF file")
        cur.pos = 4
        self.version = cur.unpack("<I", "version")
        if self.version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(self.version.to_bytes(4, "little"), "big")
            hint = " (a big-endian file)" if swapped in SUPPORTED_VERSIONS else ""
            raise GGUFFileError(f"{self.path}: GGUF version {self.version}{hint} unsupported; expected 2 or 3")
        n_tensors = cur.unpack("<Q", "tensor count")
        n_kv = cur.unpack("<Q", "metadata count")
        cur.need(n_kv * _MIN_KV, f"{n_kv} metadata entries")
        self.metadata: dict[str, GGUFValue] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            if key in self.metadata:
                raise GGUFFileError(f"{self.path}: metadata key {key!r} appears twice")
            self.metadata[key] = cur.value(f"metadata {key!r}")
        self.alignment = self._alignment()
        cur.need(n_tensors * _MIN_TENSOR_INFO, f"{n_tensors} tensor infos")
        infos = [self._tensor_info(cur, i) for i in range(n_tensors)]
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        data_size = cur.size - self.data_offset
        self.tensors: dict[str, TensorInfo] = {}
        for info in infos:
            if info.name in self.tensors:
                raise GGUFFileError(f"{self.path}: tensor {info.name!r} is declared twice")
            if info.offset % self.alignment:
                raise GGUFFileError(
                    f"{self.path}: tensor {info.name!r} offset {info.offset} is not a multiple of the "
                    f"alignment {self.alignment}"
                )
            if info.offset + info.nbytes > data_size:
                raise GGUFFileError(
                    f"{self.path}: tensor {info.name!r} needs bytes [{info.offset}, {info.offset + info.nbytes}) "
                    f"of the data section, which holds {max(data_size, 0)} bytes (truncated file or a lying size)"
                )
            self.tensors[info.name] = info

    def _alignment(self) -> int:
        field = self.metadata.get("general.alignment")
        if field is None:
            return DEFAULT_ALIGNMENT
        value = field.value
        if field.type != ValueType.UINT32 or not isinstance(value, int) or value <= 0 or value & (value - 1):
            raise GGUFFileError(
                f"{self.path}: general.alignment must be a power-of-two UINT32, found {field.type.name} {value!r}"
            )
        return value

    def _tensor_info(self, cur: _Cursor, index: int) -> TensorInfo:
        name = cur.string(f"tensor #{index} name")
        n_dims = cur.unpack("<I", f"tensor {name!r} n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFFileError(f"{self.path}: tensor {name!r} has {n_dims} dims (expected 1..{MAX_DIMS})")
        dims = tuple(cur.unpack("<Q", f"tensor {name!r} dim {d}") for d in range(n_dims))
        type_id = cur.unpack("<I", f"tensor {name!r} type")
        offset = cur.unpack("<Q", f"tensor {name!r} offset")
        try:
            t = ggml_type(type_id)
        except UnsupportedLayoutError as exc:
            raise GGUFFileError(f"{self.path}: tensor {name!r}: {exc}") from None
        if dims[0] % t.block_size:
            raise GGUFFileError(
                f"{self.path}: tensor {name!r} row length {dims[0]} is not a multiple of the {t.name} "
                f"block size {t.block_size}"
            )
        rows = 1
        for d in dims[1:]:
            rows *= d
        nbytes = t.row_bytes(dims[0]) * rows  # Python ints: no overflow, checked against the file below
        return TensorInfo(name, dims, t, offset, nbytes)

    def value(self, key: str, default: Any = None) -> Any:
        """The plain Python value of metadata ``key`` (``default`` when absent)."""
        field = self.metadata.get(key)
        return default if field is None else field.python()

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name``: a read-only uint8 view of the mapped file (no copy)."""
        info = self._info(name)
        start = self.data_offset + info.offset
        return self._map[start : start + info.nbytes].view(np.ndarray)

    def array(self, name: str) -> np.ndarray:
        """Tensor ``name`` as stored, in numpy shape: plain types typed (a view), block types as uint8
        ``[..., row_bytes]``."""
        info = self._info(name)
        data = self.raw(name)
        plain = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I8": "<i1", "I16": "<i2", "I32": "<i4",
                 "I64": "<i8", "F64": "<f8"}  # fmt: skip
        if info.type.name in plain:
            return data.view(plain[info.type.name]).reshape(info.shape)
        return data.reshape(*info.shape[:-1], info.type.row_bytes(info.dims[0]))

    def dequantize(self, name: str) -> np.ndarray:
        """Tensor ``name`` decoded to float32 in numpy shape (a fresh array)."""
        info = self._info(name)
        if info.type.name in ("I8", "I16", "I32", "I64", "F64"):
            return self.array(name).astype(np.float32)
        return decode_blocks(self.raw(name), info.type).reshape(info.shape)

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise GGUFFileError(f"{self.path}: no tensor named {name!r}") from None
