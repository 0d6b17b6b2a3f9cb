"""GGUF metadata value types and their little-endian encodings.

A metadata value is kept as :class:`GGUFValue` (its GGUF type, the array element type for arrays,
and the Python value) so that a file read and written back keeps every type exactly. Numeric arrays
are numpy arrays; string arrays are lists of ``str``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np


class ValueType(enum.IntEnum):
    """GGUF ``gguf_metadata_value_type``."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# numpy dtype (little-endian) of every fixed-size scalar type.
SCALAR_DTYPES: dict[ValueType, np.dtype[Any]] = {
    ValueType.UINT8: np.dtype("<u1"),
    ValueType.INT8: np.dtype("<i1"),
    ValueType.UINT16: np.dtype("<u2"),
    ValueType.INT16: np.dtype("<i2"),
    ValueType.UINT32: np.dtype("<u4"),
    ValueType.INT32: np.dtype("<i4"),
    ValueType.FLOAT32: np.dtype("<f4"),
    ValueType.BOOL: np.dtype("<u1"),
    ValueType.UINT64: np.dtype("<u8"),
    ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT64: np.dtype("<f8"),
}


@dataclass(frozen=True, eq=False)
class GGUFValue:
    """One metadata value. ``element_type`` is set for arrays only."""

    type: ValueType
    value: Any
    element_type: ValueType | None = None

    def python(self) -> Any:
        """The value as plain Python (numeric arrays become lists)."""
        if isinstance(self.value, np.ndarray):
            if self.element_type == ValueType.BOOL:
                return [bool(v) for v in self.value]
            return self.value.tolist()
        return self.value


def infer(value: Any) -> GGUFValue:
    """A :class:`GGUFValue` for a plain Python value (bool, int, float, str, list or numpy array).

    ints become INT32 when they fit, else INT64 (UINT64 when above INT64); floats FLOAT32; lists
    take the type of their first element (an empty list is an INT32 array).
    """
    if isinstance(value, GGUFValue):
        return value
    if isinstance(value, bool):
        return GGUFValue(ValueType.BOOL, value)
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return GGUFValue(ValueType.INT32, value)
        return GGUFValue(ValueType.INT64 if value < 2**63 else ValueType.UINT64, value)
    if isinstance(value, float):
        return GGUFValue(ValueType.FLOAT32, value)
    if isinstance(value, str):
        return GGUFValue(ValueType.STRING, value)
    if isinstance(value, np.ndarray):
        for vtype, dtype in SCALAR_DTYPES.items():
            if vtype != ValueType.BOOL and dtype == value.dtype.newbyteorder("<"):
                return GGUFValue(ValueType.ARRAY, value, vtype)
        raise TypeError(f"metadata array dtype {value.dtype} has no GGUF value type")
    if isinstance(value, (list, tuple)):
        if not value:
            return GGUFValue(ValueType.ARRAY, np.zeros(0, dtype="<i4"), ValueType.INT32)
        first = infer(value[0])
        if first.type == ValueType.STRING:
            return GGUFValue(ValueType.ARRAY, [str(v) for v in value], ValueType.STRING)
        if first.type == ValueType.ARRAY:
            raise TypeError("nested metadata arrays are not supported")
        return GGUFValue(ValueType.ARRAY, np.asarray(value, dtype=SCALAR_DTYPES[first.type]), first.type)
    raise TypeError(f"metadata value of type {type(value).__name__} has no GGUF value type")
