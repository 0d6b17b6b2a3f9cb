"""The logical quantized weight: what every quantizer produces and every layout stores.

A layout is only a way of laying this object out as named tensors. Shapes and units:

* ``codes``  ``[out, in]`` unsigned integer codes in ``[0, 2**bits - 1]`` (dtype uint8 for bits <= 8).
* ``scales`` ``[G, out]`` floating point (float16, bfloat16-as-float32, or float32; the dtype is kept
  so that transcoding is bit exact).
* ``zeros``  ``[G, out]`` integer **true** zero points (the "v2" convention: no ``-1`` offset), int32.
* ``g_idx``  ``[in]`` int32 group index of every input column, values in ``[0, G)``.
* ``G`` = number of groups = ``ceil(in / group_size)``, or 1 when ``group_size == -1``.

Dequantization is exactly ``W[o, i] = scales[g_idx[i], o] * (codes[o, i] - zeros[g_idx[i], o])``
computed in float32, giving ``[out, in]`` float32 (row-blocked, so temporaries stay small).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import DTypeLike

from .errors import LayoutError

# Values per row block of :meth:`QuantizedWeight.dequantize` (1 Mi float32 = 4 MiB per temporary).
BLOCK_ELEMENTS = 1 << 20


def group_count(in_features: int, group_size: int) -> int:
    """Number of quantization groups along the input axis (``-1`` means one group)."""
    if group_size == -1:
        return 1
    if group_size <= 0:
        raise LayoutError(f"group_size: expected -1 or a positive integer, found {group_size}")
    return -(-in_features // group_size)


def default_g_idx(in_features: int, group_size: int) -> np.ndarray:
    """The natural (non act-order) group map ``i // group_size`` as int32 ``[in]``."""
    if group_size == -1:
        return np.zeros(in_features, dtype=np.int32)
    return (np.arange(in_features, dtype=np.int32) // np.int32(group_size)).astype(np.int32)


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A quantized linear weight in layout-independent form (see the module docstring for shapes)."""

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray
    g_idx: np.ndarray
    bits: int
    group_size: int
    sym: bool
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    @property
    def out_features(self) -> int:
        return int(self.codes.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.codes.shape[1])

    @property
    def num_groups(self) -> int:
        return int(self.scales.shape[0])

    def has_default_g_idx(self) -> bool:
        """True when ``g_idx`` is the natural ``i // group_size`` map (no act-order permutation)."""
        return bool(np.array_equal(self.g_idx, default_g_idx(self.in_features, self.group_size)))

    def check(self) -> None:
        """Raise :class:`LayoutError` naming the first field whose shape, dtype or range is wrong."""
        if not 1 <= self.bits <= 8:
            raise LayoutError(f"bits: expected 1..8, found {self.bits}")
        if self.codes.ndim != 2:
            raise LayoutError(f"codes: expected 2-D [out, in], found shape {self.codes.shape}")
        if self.codes.dtype.kind not in "ui":
            raise LayoutError(f"codes: expected an integer dtype, found {self.codes.dtype}")
        out, in_ = self.codes.shape
        groups = group_count(in_, self.group_size)
        for name, arr in (("scales", self.scales), ("zeros", self.zeros)):
            if arr.shape != (groups, out):
                raise LayoutError(f"{name}: expected shape {(groups, out)} = [G, out], found {arr.shape}")
        if self.scales.dtype.kind != "f":
            raise LayoutError(f"scales: expected a float dtype, found {self.scales.dtype}")
        if self.zeros.dtype.kind not in "ui":
            raise LayoutError(f"zeros: expected an integer dtype, found {self.zeros.dtype}")
        if self.g_idx.shape != (in_,):
            raise LayoutError(f"g_idx: expected shape {(in_,)}, found {self.g_idx.shape}")
        if in_ and (int(self.g_idx.min()) < 0 or int(self.g_idx.max()) >= groups):
            raise LayoutError(
                f"g_idx: expected values in [0, {groups}), found [{int(self.g_idx.min())}, {int(self.g_idx.max())}]"
            )
        top = (1 << self.bits) - 1
        if self.codes.size and (int(self.codes.min()) < 0 or int(self.codes.max()) > top):
            raise LayoutError(f"codes: expected values in [0, {top}] for {self.bits}-bit")

    def dequantize(self, dtype: DTypeLike = np.float32, *, block_elements: int = BLOCK_ELEMENTS) -> np.ndarray:
        """``[out, in]`` in ``dtype``: ``scales[g_idx[i], o] * (codes[o, i] - zeros[g_idx[i], o])``.

        The arithmetic is float32 whatever ``dtype`` is (the result is cast afterwards), and is the same
        for every blocking, so the float32 result is bit-identical to the unblocked formula. Output rows
        are processed in blocks of about ``block_elements`` values: beside the result, the extra memory
        is two ``[rows, in]`` float32 blocks (gathered scales and zeros), plus one float32 block of
        scratch when ``dtype`` is not float32.
        """
        out_f, in_f = self.codes.shape
        result = np.empty((out_f, in_f), dtype=dtype)
        rows = max(1, int(block_elements) // max(1, in_f))
        scales_t = np.ascontiguousarray(self.scales.T, dtype=np.float32)  # [out, G], small
        zeros_t = np.ascontiguousarray(self.zeros.T, dtype=np.float32)
        in_place = result.dtype == np.float32
        for r0 in range(0, out_f, rows):
            r1 = min(out_f, r0 + rows)
            block = result[r0:r1] if in_place else np.empty((r1 - r0, in_f), dtype=np.float32)
            np.copyto(block, self.codes[r0:r1], casting="unsafe")
            block -= zeros_t[r0:r1][:, self.g_idx]
            block *= scales_t[r0:r1][:, self.g_idx]
            if not in_place:
                result[r0:r1] = block
        return result

    def equals(self, other: QuantizedWeight, *, compare_sym: bool = True) -> bool:
        """Bit-exact equality of every field (dtype of scales included; ``sym`` unless ``compare_sym`` is off)."""
        return (
            self.bits == other.bits
            and self.group_size == other.group_size
            and (self.sym == other.sym or not compare_sym)
            and np.array_equal(self.codes, other.codes)
            and self.scales.dtype == other.scales.dtype
            and np.array_equal(self.scales.view(np.uint8), other.scales.view(np.uint8))
            and np.array_equal(self.zeros, other.zeros)
            and np.array_equal(self.g_idx, other.g_idx)
        )
