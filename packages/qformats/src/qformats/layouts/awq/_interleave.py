"""The GEMV_FAST weight interleave (``pack_intweight`` with interleave 4, kstride 64), both directions.

Input codes ``[N=out, K=in]`` (4-bit); output ``[N/4, K]`` int16 words, each holding one code from each
of 4 consecutive output rows as nibbles (row 0 at bits 0-3 ... row 3 at bits 12-15). Steps:

1. within each 32-code chunk along K, view as ``[4, 4, 2]`` and swap the first two axes
   (order 0,1,8,9,16,17,24,25, 2,3,10,11, ...);
2. within each 8-code group, reorder to ``[0, 2, 4, 6, 1, 3, 5, 7]``;
3. view ``[N/4, 4, K/64, 64]``, transpose to ``[N/4, K/64, 4, 64]`` and *reinterpret* that memory as
   ``[N/4, K/64, 64, 4]``;
4. pack the last axis (4 values) into one 16-bit word, value j at shift ``4j``.

Requires ``N % 4 == 0`` and ``K % 64 == 0``.
"""

from __future__ import annotations

import numpy as np

INTERLEAVE = 4
KSTRIDE = 64


def interleave_codes(codes: np.ndarray) -> np.ndarray:
    """Codes ``[N, K]`` -> int16 words ``[N/4, K]`` (see the module docstring)."""
    n, k = codes.shape
    c: np.ndarray = codes.astype(np.uint16).reshape(n, k // 32, 4, 4, 2).transpose(0, 1, 3, 2, 4)
    c = c.reshape(n, k // 32, 4, 4, 2).transpose(0, 1, 2, 4, 3).reshape(n, k)
    c = c.reshape(n // INTERLEAVE, INTERLEAVE, k // KSTRIDE, KSTRIDE).transpose(0, 2, 1, 3)
    c = np.ascontiguousarray(c).reshape(n // INTERLEAVE, k // KSTRIDE, KSTRIDE, INTERLEAVE)
    words = c[..., 0] | (c[..., 1] << 4) | (c[..., 2] << 8) | (c[..., 3] << 12)
    return np.ascontiguousarray(words.reshape(n // INTERLEAVE, k).astype(np.uint16)).view(np.int16)


def deinterleave_codes(words: np.ndarray) -> np.ndarray:
    """Inverse of :func:`interleave_codes`: int16 ``[N/4, K]`` -> uint8 codes ``[N, K]``."""
    rows, k = words.shape
    n = rows * INTERLEAVE
    w = np.ascontiguousarray(words).view(np.uint16).reshape(rows, k // KSTRIDE, KSTRIDE)
    c: np.ndarray = np.stack([(w >> np.uint16(4 * j)) & np.uint16(0xF) for j in range(INTERLEAVE)], axis=-1)
    c = c.reshape(rows, k // KSTRIDE, INTERLEAVE, KSTRIDE).transpose(0, 2, 1, 3).reshape(n, k)
    c = c.reshape(n, k // 32, 4, 2, 4).transpose(0, 1, 2, 4, 3).reshape(n, k)
    c = c.reshape(n, k // 32, 4, 4, 2).transpose(0, 1, 3, 2, 4).reshape(n, k)
    return np.ascontiguousarray(c).astype(np.uint8)
