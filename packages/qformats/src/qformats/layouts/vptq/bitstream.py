"""VPTQ index rows as one little-endian bitstream of 32-bit words.

A row of ``n`` indices of ``bits`` bits each (``bits <= 32``; with a residual codebook each element is
``index | residual << index_bits``) is laid out element after element, bit 0 first, starting at bit 0 of
word 0 (bit ``b`` of the stream is bit ``b % 32`` of word ``b // 32``); the last word is zero-padded.
Shapes: values ``[..., n]`` (non-negative, below ``2**bits``) <-> int32 words ``[..., ceil(n * bits / 32)]``.
"""

from __future__ import annotations

import numpy as np


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """``[..., n]`` integers -> int32 words ``[..., ceil(n * bits / 32)]``."""
    lead, n = values.shape[:-1], values.shape[-1]
    words = -(-n * bits // 32)
    flat = values.reshape(-1, n).astype(np.uint64)
    start = np.arange(n, dtype=np.uint64) * np.uint64(bits)
    out = np.zeros((flat.shape[0], words + 1), dtype=np.uint64)
    word, shift = (start // np.uint64(32)).astype(np.intp), start % np.uint64(32)
    shifted = flat << shift  # at most 63 bits: the value spans this word and the next
    rows = np.arange(flat.shape[0])[:, None]
    # Elements occupy disjoint bits, so adding them into their words is the same as OR-ing them.
    np.add.at(out, (rows, word[None, :]), shifted & np.uint64(0xFFFFFFFF))
    np.add.at(out, (rows, word[None, :] + 1), shifted >> np.uint64(32))
    return out[:, :words].astype(np.uint32).view(np.int32).reshape(*lead, words)


def unpack_bits(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: int32 words -> int64 values ``[..., n]``."""
    lead = words.shape[:-1]
    flat = np.ascontiguousarray(words).reshape(-1, words.shape[-1]).view(np.uint32).astype(np.uint64)
    padded = np.concatenate([flat, np.zeros((flat.shape[0], 1), np.uint64)], axis=1)
    start = np.arange(n, dtype=np.uint64) * np.uint64(bits)
    word, shift = (start // np.uint64(32)).astype(np.intp), start % np.uint64(32)
    window = padded[:, word] | (padded[:, word + 1] << np.uint64(32))
    values = (window >> shift) & np.uint64((1 << bits) - 1)
    result: np.ndarray = values.astype(np.int64).reshape(*lead, n)
    return result
