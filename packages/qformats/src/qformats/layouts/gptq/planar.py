"""Planar (GPTQ_P) bit-plane packing of 2..8-bit codes into int32 words, along the last axis.

Each b-bit code is split into planes whose widths divide 32 (low plane first):

====  ==============  ==========================================
bits  plane widths    reconstruction
====  ==============  ==========================================
2     2               single plane
3     2, 1            lo | hi << 2
4     4               single plane
5     4, 1            lo | hi << 4
6     4, 2            lo | hi << 4
7     4, 2, 1         lo | mid << 4 | hi << 6
8     8               single plane
====  ==============  ==========================================

Every block of 32 logical codes becomes exactly ``b`` int32 words: the low plane's ``w`` words first,
then the next plane's. Inside a plane of width ``w``, word ``i`` holds codes ``[i*32/w, (i+1)*32/w)`` at
shifts ``w*j`` -- the continuous packing of that plane's values. So 2/4/8-bit planar words equal the
continuous words, and the line length must be a multiple of 32.
"""

from __future__ import annotations

import numpy as np

from ...errors import LayoutError
from .bitstream import pack_stream, unpack_stream

PLANES: dict[int, tuple[int, ...]] = {
    2: (2,),
    3: (2, 1),
    4: (4,),
    5: (4, 1),
    6: (4, 2),
    7: (4, 2, 1),
    8: (8,),
}


def planes(bits: int) -> tuple[int, ...]:
    """Plane widths of a planar ``bits``-bit code, low plane first."""
    try:
        return PLANES[int(bits)]
    except KeyError:
        raise LayoutError(f"bits: planar gptq_p supports 2..8 bits, found {bits}") from None


def _check_line(n: int) -> None:
    if n % 32:
        raise LayoutError(f"planar gptq_p: the packed dimension must be a multiple of 32, found {n}")


def pack_planar(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack ``codes[..., n]`` (``n % 32 == 0``) into int32 words ``[..., n * bits / 32]``."""
    widths = planes(bits)
    codes = np.asarray(codes)
    lead, n = codes.shape[:-1], codes.shape[-1]
    _check_line(n)
    blocks = codes.astype(np.uint8, copy=False).reshape(*lead, n // 32, 32)
    if len(widths) == 1:
        return pack_stream(codes, bits, "int32")
    out = np.empty((*lead, n // 32, bits), dtype=np.dtype("<i4"))
    offset = 0
    for width in widths:
        plane = (blocks >> np.uint8(offset)) & np.uint8((1 << width) - 1)
        out[..., offset : offset + width] = pack_stream(plane, width, "int32")
        offset += width
    return out.reshape(*lead, n // 32 * bits)


def unpack_planar(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Unpack int32 ``words[..., n * bits / 32]`` into uint8 codes ``[..., n]`` (``n % 32 == 0``)."""
    widths = planes(bits)
    words = np.asarray(words)
    _check_line(n)
    if words.dtype != np.int32:
        raise LayoutError(f"planar gptq_p: words must be int32, found {words.dtype}")
    lead, count = words.shape[:-1], words.shape[-1]
    if count != n // 32 * bits:
        raise LayoutError(f"planar gptq_p: {n} {bits}-bit codes need {n // 32 * bits} words, found {count}")
    if len(widths) == 1:
        return unpack_stream(words, bits, n)
    blocks = words.reshape(*lead, n // 32, bits)
    codes = np.zeros((*lead, n // 32, 32), dtype=np.uint8)
    offset = 0
    for width in widths:
        plane = unpack_stream(blocks[..., offset : offset + width], width, 32)
        codes |= plane << np.uint8(offset)
        offset += width
    return codes.reshape(*lead, n)
