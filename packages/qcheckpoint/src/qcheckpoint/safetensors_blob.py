"""A minimal, strict safetensors writer/reader over in-memory bytes (the continuation's container).

Format (safetensors 0.4+): 8-byte little-endian header length N, N bytes of UTF-8 JSON (padded with spaces to a
multiple of 8), then the tensor data. The header maps tensor names to ``{"dtype", "shape", "data_offsets"}``
(offsets relative to the data section, contiguous, covering it exactly) plus an optional ``__metadata__``
str → str map. The reader validates every field, so a damaged blob raises :class:`ContinuationError` instead of
reading out of bounds; it never executes anything.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from .errors import ContinuationError

#: safetensors dtype name → item size in bytes.
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
METADATA_KEY = "__metadata__"
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class BlobTensor:
    """One tensor of a blob: safetensors dtype name, shape and its raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: memoryview


def write_blob(tensors: list[tuple[str, BlobTensor]], metadata: dict[str, str]) -> bytes:
    """Serialize named tensors (in the given order) and string metadata to safetensors bytes."""
    header: dict[str, Any] = {METADATA_KEY: metadata}
    offset = 0
    for name, tensor in tensors:
        header[name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.data.nbytes],
        }
        offset += tensor.data.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    text += b" " * (-len(text) % 8)
    parts: list[bytes | memoryview] = [struct.pack("<Q", len(text)), text]
    parts.extend(tensor.data for _name, tensor in tensors)
    return b"".join(parts)  # one copy of the tensor bytes


def _fail(message: str) -> ContinuationError:
    return ContinuationError(f"continuation blob: {message}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _parse_entry(name: str, entry: object, data_size: int) -> tuple[int, int, str, tuple[int, ...]]:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise _fail(f"tensor {name!r}: expected keys dtype, shape, data_offsets, found {entry!r:.120}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_SIZES:
        raise _fail(f"tensor {name!r}: unsupported dtype {dtype!r}; expected one of {', '.join(DTYPE_SIZES)}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise _fail(f"tensor {name!r}: shape must be a list of ints >= 0, found {shape!r:.120}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise _fail(f"tensor {name!r}: data_offsets {offsets!r:.120} outside the data section of {data_size} bytes")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise _fail(f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape} {dtype}, expected {expected}")
    return offsets[0], offsets[1], dtype, tuple(shape)


def read_blob(data: bytes | memoryview) -> tuple[dict[str, str], dict[str, BlobTensor]]:
    """Parse safetensors bytes into (metadata, name → tensor); every inconsistency raises ContinuationError."""
    view = memoryview(data).cast("B")
    if view.nbytes < 8:
        raise _fail(f"{view.nbytes} bytes is too short for a safetensors header")
    (length,) = struct.unpack_from("<Q", view, 0)
    if length > min(_MAX_HEADER, view.nbytes - 8):
        raise _fail(f"header length {length} exceeds the {view.nbytes - 8} bytes available")
    try:
        header = json.loads(bytes(view[8 : 8 + length]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(f"header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _fail(f"header must be a JSON object, found {type(header).__name__}")
    metadata = header.pop(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail("__metadata__ must map str to str")
    body = view[8 + length :]
    spans = sorted((_parse_entry(name, entry, body.nbytes), name) for name, entry in header.items())
    position = 0
    tensors: dict[str, BlobTensor] = {}
    for (begin, end, dtype, shape), name in spans:
        if begin != position:
            raise _fail(f"tensor {name!r} starts at {begin}, expected {position} (overlap or gap)")
        tensors[name] = BlobTensor(dtype, shape, body[begin:end])
        position = end
    if position != body.nbytes:
        raise _fail(f"data section holds {body.nbytes} bytes but tensors cover {position}")
    return metadata, tensors
