"""Bit packing primitives shared by the AWQ layouts (pure numpy, inputs never mutated).

Units: ``codes`` are unsigned integer arrays whose values fit in ``bits`` bits; words are 32-bit
(``int32`` on disk, handled here as ``uint32`` so shifts never sign-extend). Every function packs or
unpacks along the **last** axis of a 2-D array.
"""

from __future__ import annotations

import numpy as np

# AWQ GEMM 4-bit order map: nibble slot k (shift 4*k) of a word holds column AWQ_ORDER[k] of its 8-column block.
AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7], dtype=np.intp)
# Inverse map: column c of a block sits in nibble slot AWQ_REVERSE_ORDER[c].
AWQ_REVERSE_ORDER = np.argsort(AWQ_ORDER).astype(np.intp)
# Plain order: nibble slot k holds column k.
SEQUENTIAL_ORDER = np.arange(8, dtype=np.intp)


def pack_nibbles_ordered(codes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Pack ``[R, 8*n]`` 4-bit codes into ``[R, n]`` uint32 words; slot k holds block column ``order[k]``.

    Works byte-wise: little-endian byte j of a word holds slots ``2j`` (low nibble) and ``2j+1`` (high).
    """
    rows, cols = codes.shape
    blocks = codes.reshape(rows, cols // 8, 8)
    out = np.empty((rows, cols // 8, 4), dtype=np.uint8)
    for j in range(4):
        lo = blocks[:, :, int(order[2 * j])].astype(np.uint8)
        hi = blocks[:, :, int(order[2 * j + 1])].astype(np.uint8)
        np.bitwise_or(lo, hi << np.uint8(4), out=out[:, :, j])
    return out.reshape(rows, -1).view("<u4").astype(np.uint32, copy=False)


def unpack_nibbles_ordered(words: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_nibbles_ordered`: ``[R, n]`` words -> ``[R, 8*n]`` uint8 codes."""
    w = np.ascontiguousarray(words).astype("<u4", copy=False)
    rows, n = w.shape
    as_bytes = w.view(np.uint8).reshape(rows, n, 4)
    out = np.empty((rows, n, 8), dtype=np.uint8)
    for j in range(4):
        byte = as_bytes[:, :, j]
        out[:, :, int(order[2 * j])] = byte & np.uint8(0xF)
        out[:, :, int(order[2 * j + 1])] = byte >> np.uint8(4)
    return out.reshape(rows, n * 8)


def words_for(count: int, bits: int) -> int:
    """Number of 32-bit words holding ``count`` codes of ``bits`` bits as a continuous stream."""
    return -(-count * bits // 32)


def pack_bitstream(codes: np.ndarray, bits: int) -> np.ndarray:
    """Continuous little-endian bit stream along the last axis: ``[R, n]`` -> ``[R, ceil(n*bits/32)]`` uint32.

    Code j occupies stream bits ``[j*bits, (j+1)*bits)``; codes may straddle two words; the tail of the
    last word is zero.
    """
    rows, n = codes.shape
    nwords = words_for(n, bits)
    shifts = np.arange(bits, dtype=np.uint8)
    stream = ((codes.astype(np.uint8)[:, :, None] >> shifts) & 1).astype(np.uint8).reshape(rows, n * bits)
    padded = np.zeros((rows, nwords * 32), dtype=np.uint8)
    padded[:, : n * bits] = stream
    as_bytes = np.packbits(padded, axis=1, bitorder="little")
    return np.ascontiguousarray(as_bytes).view("<u4").astype(np.uint32).reshape(rows, nwords)


def unpack_bitstream(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bitstream`: ``[R, w]`` words -> ``[R, count]`` uint8 codes."""
    rows = words.shape[0]
    as_bytes = np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(rows, -1)
    stream = np.unpackbits(as_bytes, axis=1, bitorder="little")[:, : count * bits].reshape(rows, count, bits)
    weights = (1 << np.arange(bits, dtype=np.uint16)).astype(np.uint16)
    codes: np.ndarray = (stream.astype(np.uint16) * weights).sum(axis=2).astype(np.uint8)
    return codes


def pack_sequential(codes: np.ndarray, bits: int) -> np.ndarray:
    """Plain sequential packing of ``32 // bits`` codes per uint32 word, code j at shift ``bits*j``.

    ``codes`` is ``[R, n]`` with ``n`` a multiple of ``32 // bits``; returns ``[R, n * bits / 32]``.
    """
    if bits == 4:
        return pack_nibbles_ordered(codes, SEQUENTIAL_ORDER)
    per_word = 32 // bits
    rows, n = codes.shape
    blocks = codes.reshape(rows, n // per_word, per_word).astype(np.uint32)
    words = np.zeros((rows, n // per_word), dtype=np.uint32)
    for j in range(per_word):
        words |= blocks[:, :, j] << np.uint32(bits * j)
    return words


def unpack_sequential(words: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_sequential`: ``[R, w]`` uint32 words -> ``[R, w * 32 / bits]`` uint8 codes."""
    if bits == 4:
        return unpack_nibbles_ordered(words, SEQUENTIAL_ORDER)
    per_word = 32 // bits
    w = words.astype(np.uint32, copy=False)
    rows, n = w.shape
    mask = np.uint32((1 << bits) - 1)
    out = np.empty((rows, n, per_word), dtype=np.uint8)
    for j in range(per_word):
        out[:, :, j] = ((w >> np.uint32(bits * j)) & mask).astype(np.uint8)
    return out.reshape(rows, n * per_word)


def as_int32_words(words: np.ndarray) -> np.ndarray:
    """Reinterpret uint32 words as the int32 dtype that checkpoints store (bit pattern unchanged)."""
    return np.ascontiguousarray(words.astype(np.uint32, copy=False)).view(np.int32)
