"""Write a native .gguf file (version 3, little-endian).

``tensors`` maps names to either a plain numpy array (stored as F32, F16 or BF16-as-uint16 is not
inferred: float32 -> F32, float16 -> F16) or a ``(bytes, qtype)`` pair where ``bytes`` is uint8
``[..., row_bytes]`` holding whole ggml blocks of ``qtype``. Tensor data starts at an aligned offset
and every tensor is padded with zeros to the alignment, as ggml writes it. The file is written to a
temporary name and renamed into place, so a crash never leaves a half-written file at ``path``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np

from ..layouts.gguf.types import GGMLType, ggml_type
from .errors import GGUFFileError
from .reader import DEFAULT_ALIGNMENT, MAGIC
from .values import SCALAR_DTYPES, GGUFValue, ValueType, infer

TensorSource = np.ndarray | tuple[np.ndarray, str]


def _string(out: BinaryIO, text: str) -> None:
    raw = text.encode("utf-8")
    out.write(struct.pack("<Q", len(raw)))
    out.write(raw)


def _value_body(out: BinaryIO, field: GGUFValue) -> None:
    if field.type == ValueType.STRING:
        _string(out, str(field.value))
    elif field.type == ValueType.ARRAY:
        if field.element_type is None:
            raise GGUFFileError("metadata array without an element type")
        out.write(struct.pack("<IQ", int(field.element_type), len(field.value)))
        if field.element_type == ValueType.STRING:
            for item in field.value:
                _string(out, str(item))
        else:
            out.write(np.asarray(field.value, dtype=SCALAR_DTYPES[field.element_type]).tobytes())
    else:
        out.write(np.asarray(field.value, dtype=SCALAR_DTYPES[field.type]).tobytes())


def _tensor_entry(name: str, source: TensorSource) -> tuple[tuple[int, ...], GGMLType, np.ndarray]:
    """(ggml dims, type, contiguous bytes) of one tensor."""
    if isinstance(source, tuple):
        data, qtype = source
        t = ggml_type(qtype)
        if data.dtype != np.uint8 or data.ndim < 1 or data.shape[-1] % t.type_size:
            raise GGUFFileError(
                f"tensor {name!r}: expected uint8 [..., k * {t.type_size}] bytes of {t.name}, "
                f"found {data.dtype} {data.shape}"
            )
        shape = (*data.shape[:-1], data.shape[-1] // t.type_size * t.block_size)
        return tuple(reversed(shape)), t, np.ascontiguousarray(data)
    kinds = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int8"): "I8",
             np.dtype("int16"): "I16", np.dtype("int32"): "I32", np.dtype("int64"): "I64",
             np.dtype("float64"): "F64"}  # fmt: skip
    kind = kinds.get(source.dtype)
    if kind is None:
        raise GGUFFileError(f"tensor {name!r}: dtype {source.dtype} has no plain GGUF type; pass (bytes, qtype)")
    if not 1 <= source.ndim <= 4:
        raise GGUFFileError(f"tensor {name!r}: expected 1..4 dims, found {source.ndim}")
    data = np.ascontiguousarray(source.astype(source.dtype.newbyteorder("<"), copy=False))
    return tuple(reversed(source.shape)), ggml_type(kind), data


def write_gguf(
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any],
    tensors: Mapping[str, TensorSource],
    *,
    alignment: int | None = None,
) -> None:
    """Write ``metadata`` (plain values or :class:`GGUFValue`) and ``tensors`` to ``path``."""
    fields = {key: infer(value) for key, value in metadata.items()}
    if alignment is not None and "general.alignment" not in fields and alignment != DEFAULT_ALIGNMENT:
        fields["general.alignment"] = GGUFValue(ValueType.UINT32, alignment)
    declared = fields.get("general.alignment")
    align = int(declared.value) if declared is not None else (alignment or DEFAULT_ALIGNMENT)
    if align <= 0 or align & (align - 1):
        raise GGUFFileError(f"{path}: alignment must be a power of two, found {align}")
    if alignment is not None and align != alignment:
        raise GGUFFileError(f"{path}: alignment={alignment} contradicts general.alignment={align}")
    entries = [(name, *_tensor_entry(name, source)) for name, source in tensors.items()]
    tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            out.write(MAGIC + struct.pack("<IQQ", 3, len(entries), len(fields)))
            for key, field in fields.items():
                _string(out, key)
                out.write(struct.pack("<I", int(field.type)))
                _value_body(out, field)
            offset = 0
            for name, dims, t, data in entries:
                _string(out, name)
                out.write(struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims))
                out.write(struct.pack("<IQ", t.type_id, offset))
                offset += -(-data.nbytes // align) * align
            out.write(b"\0" * (-out.tell() % align))
            for _, _, _, data in entries:
                out.write(memoryview(data.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
                out.write(b"\0" * (-data.nbytes % align))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
