"""safetensors dtype names <-> numpy dtypes, and the bfloat16 bit conversions numpy lacks.

numpy has no bfloat16, so ``BF16`` tensors are read as float32 (exact: bf16 is the top half of an
fp32) and written back as ``BF16`` only when the caller asks (``dtypes={name: "BF16"}``). FP8 tensors
(``F8_E4M3``, ``F8_E5M2``, ``F8_E8M0``) are read as their raw uint8 bytes.
"""

from __future__ import annotations

import numpy as np

from ..errors import CheckpointFormatError

# safetensors dtype -> (numpy dtype read as, bytes per element)
SAFETENSORS_DTYPES: dict[str, tuple[np.dtype, int]] = {
    "BOOL": (np.dtype(np.bool_), 1),
    "U8": (np.dtype("<u1"), 1),
    "I8": (np.dtype("<i1"), 1),
    "F8_E4M3": (np.dtype("<u1"), 1),
    "F8_E5M2": (np.dtype("<u1"), 1),
    "F8_E8M0": (np.dtype("<u1"), 1),
    "I16": (np.dtype("<i2"), 2),
    "U16": (np.dtype("<u2"), 2),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I32": (np.dtype("<i4"), 4),
    "U32": (np.dtype("<u4"), 4),
    "F32": (np.dtype("<f4"), 4),
    "F64": (np.dtype("<f8"), 8),
    "I64": (np.dtype("<i8"), 8),
    "U64": (np.dtype("<u8"), 8),
}

# Sort rank used by the safetensors writer: tensors are laid out by dtype, largest rank first, then name.
DTYPE_RANK: dict[str, int] = {
    name: rank
    for rank, name in enumerate(
        [
            "BOOL",
            "U8",
            "I8",
            "F8_E5M2",
            "F8_E4M3",
            "F8_E8M0",
            "I16",
            "U16",
            "F16",
            "BF16",
            "I32",
            "U32",
            "F32",
            "F64",
            "I64",
            "U64",
        ]
    )
}

_NUMPY_TO_SAFETENSORS: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "uint64": "U64",
}


def safetensors_dtype(array: np.ndarray, name: str) -> str:
    """The safetensors dtype name for ``array`` (raises naming the tensor for unsupported dtypes)."""
    try:
        return _NUMPY_TO_SAFETENSORS[str(array.dtype)]
    except KeyError:
        raise CheckpointFormatError(f"tensor {name!r}: dtype {array.dtype} has no safetensors equivalent") from None


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 values (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bfloat16 bit patterns, round to nearest even (exact for bf16-representable values)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((u >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    out = ((u + rounding) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(values)
    if bool(np.any(nan)):
        out[nan] = np.uint16(0x7FC0)
    return out
