"""numpy arrays ↔ blob tensors for the continuation codec (numpy arrays always live on the CPU)."""

from __future__ import annotations

import numpy as np

from .errors import ContinuationError
from .safetensors_blob import BlobTensor

_TO_SAFETENSORS: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
}
_FROM_SAFETENSORS = {v: k for k, v in _TO_SAFETENSORS.items()}


def numpy_to_blob(array: np.ndarray, path: str) -> BlobTensor:
    """Little-endian contiguous bytes of ``array``; unsupported dtypes raise ContinuationError naming ``path``."""
    name = _TO_SAFETENSORS.get(array.dtype.name) if array.dtype.fields is None else None
    if name is None:
        raise ContinuationError(
            f"{path}: numpy dtype {array.dtype} is not supported; expected one of {', '.join(_TO_SAFETENSORS)}"
        )
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return BlobTensor(name, tuple(int(d) for d in array.shape), little.reshape(-1).view(np.uint8).data)


def numpy_from_blob(tensor: BlobTensor, path: str) -> np.ndarray:
    """A new, writable numpy array holding the blob tensor's bytes (native byte order)."""
    name = _FROM_SAFETENSORS.get(tensor.dtype)
    if name is None:
        raise ContinuationError(f"{path}: safetensors dtype {tensor.dtype} has no numpy equivalent")
    dtype = np.dtype(name).newbyteorder("<")
    array = np.frombuffer(tensor.data, dtype=dtype).reshape(tensor.shape).astype(np.dtype(name), copy=True)
    check = np.ascontiguousarray(array, dtype=dtype).reshape(-1).view(np.uint8)
    if check.tobytes() != tensor.data.tobytes():
        raise ContinuationError(f"{path}: restored numpy array differs from the stored bytes")
    return array
