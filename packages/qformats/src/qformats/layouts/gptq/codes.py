"""Integer codes from a dense weight with the GPTQ-family packer formula (saturating, never wrapping).

For weight element ``W[o, i]`` with group ``g = g_idx[i]``:
``q = round((W[o, i] + zeros[g, o] * scales[g, o]) / scales[g, o])`` computed in float32 (round half to
even), then **clamped** to ``[0, 2**bits - 1]`` -- the reference's three GPTQ packers saturate, so an
out-of-grid weight becomes the nearest end code instead of wrapping into a neighbouring field.
Negative ``g_idx`` entries are normalized by adding ``G`` (as the reference block packer does).
"""

from __future__ import annotations

import numpy as np

from ...errors import LayoutError
from ...logical import QuantizedWeight


def codes_from_dense(
    weight: np.ndarray, scales: np.ndarray, zeros: np.ndarray, g_idx: np.ndarray, bits: int
) -> np.ndarray:
    """uint8 codes ``[out, in]`` for a float ``weight[out, in]``, ``scales``/``zeros`` ``[G, out]``, ``g_idx[in]``."""
    weight = np.asarray(weight)
    if weight.ndim != 2 or weight.dtype.kind != "f":
        raise LayoutError(f"weight: expected a 2-D float array [out, in], found {weight.dtype} {weight.shape}")
    out, in_ = weight.shape
    scales = np.asarray(scales, dtype=np.float32)
    zeros = np.asarray(zeros)
    if scales.ndim != 2 or scales.shape[1] != out or zeros.shape != scales.shape:
        raise LayoutError(f"scales/zeros: expected [G, {out}], found {scales.shape} and {zeros.shape}")
    if not np.all(np.isfinite(scales)) or np.any(scales == 0):
        raise LayoutError("scales: expected finite non-zero values")
    groups = scales.shape[0]
    g = np.asarray(g_idx).astype(np.int64)
    if g.shape != (in_,):
        raise LayoutError(f"g_idx: expected shape ({in_},), found {g.shape}")
    g = np.where(g < 0, g + groups, g)
    if in_ and (g.min() < 0 or g.max() >= groups):
        raise LayoutError(f"g_idx: expected values in [-{groups}, {groups}), found [{g.min()}, {g.max()}]")
    s = scales[g].T  # [out, in]
    z = zeros.astype(np.float32)[g].T
    q = np.round((weight.astype(np.float32) + z * s) / s)
    codes: np.ndarray = np.clip(q, 0, (1 << bits) - 1).astype(np.uint8)
    return codes


def weight_from_dense(
    weight: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray,
    g_idx: np.ndarray,
    *,
    bits: int,
    group_size: int,
    sym: bool,
) -> QuantizedWeight:
    """A :class:`QuantizedWeight` whose codes come from :func:`codes_from_dense` (scales dtype kept)."""
    groups = np.asarray(scales).shape[0]
    g = np.asarray(g_idx).astype(np.int64)
    g = np.where(g < 0, g + groups, g).astype(np.int32)
    codes = codes_from_dense(weight, scales, zeros, g, bits)
    return QuantizedWeight(codes, np.array(scales), np.asarray(zeros).astype(np.int32), g, bits, group_size, sym)
