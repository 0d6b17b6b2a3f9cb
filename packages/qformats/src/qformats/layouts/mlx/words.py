"""MLX affine code words: b-bit codes packed into uint32 words along the input dimension, low bits first.

MLX (``mx.quantize`` / ``mx.dequantize``, ``nn.QuantizedLinear``) stores the codes of one output row as a
single little-endian bit stream: code ``k`` of the row occupies stream bits ``[b*k, b*k + b)`` and word ``w``
holds stream bits ``[32*w, 32*(w+1))``. For 1/2/4/8 bits every word holds ``32/b`` whole codes (code ``j`` of a
word at shift ``b*j``); 3-, 5- and 6-bit codes straddle word boundaries. A row of ``n`` codes (``n`` a
multiple of 32, which every MLX group size guarantees) takes exactly ``n*b/32`` words, with no padding.

Both functions work along the **last axis**, never mutate their input, and are vectorized: ``8/gcd(b, 8)``
codes make a whole number of bytes (a chunk of at most 64 bits), so each chunk is assembled in a uint64 lane
and split into bytes, which are then viewed as little-endian uint32 words.
"""

from __future__ import annotations

from math import gcd

import numpy as np

from ...errors import LayoutError

#: Code widths MLX's affine mode stores (mlx 0.32: ``mx.quantize`` accepts exactly these).
MLX_BITS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)


def _chunk(bits: int) -> tuple[int, int]:
    """``(codes per chunk, bytes per chunk)``: the fewest codes whose bits fill whole bytes."""
    if bits not in MLX_BITS:
        raise LayoutError(f"bits: MLX affine words hold {', '.join(map(str, MLX_BITS))}-bit codes, found {bits}")
    per_chunk = 8 // gcd(bits, 8)
    return per_chunk, per_chunk * bits // 8


def pack_words(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint32 words ``[..., n*bits/32]`` of ``codes[..., n]`` (values in ``[0, 2**bits)``, ``n % 32 == 0``)."""
    per_chunk, nbytes = _chunk(bits)
    codes = np.asarray(codes)
    lead, n = codes.shape[:-1], codes.shape[-1]
    if n % 32:
        raise LayoutError(f"codes: MLX packs rows of a multiple of 32 codes, found rows of {n}")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= 1 << bits):
        raise LayoutError(f"codes: expected values in [0, {(1 << bits) - 1}] for {bits}-bit MLX words")
    chunks = codes.reshape(*lead, n // per_chunk, per_chunk)
    lane = np.zeros(chunks.shape[:-1], dtype=np.uint64)
    for j in range(per_chunk):
        lane |= chunks[..., j].astype(np.uint64) << np.uint64(bits * j)
    stream = np.empty((*lane.shape, nbytes), dtype=np.uint8)
    for k in range(nbytes):
        stream[..., k] = (lane >> np.uint64(8 * k)) & np.uint64(0xFF)
    return np.ascontiguousarray(stream.reshape(*lead, n * bits // 8)).view("<u4")


def unpack_words(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """uint8 codes ``[..., n]`` from uint32 words ``[..., n*bits/32]`` (the inverse of :func:`pack_words`)."""
    per_chunk, nbytes = _chunk(bits)
    words = np.asarray(words)
    if words.dtype != np.uint32:
        raise LayoutError(f"weight: MLX words are uint32, found {words.dtype}")
    if n % 32 or words.shape[-1] != n * bits // 32:
        raise LayoutError(f"weight: {n} {bits}-bit codes take {n * bits // 32} uint32 words, found {words.shape[-1]}")
    lead = words.shape[:-1]
    stream = np.ascontiguousarray(words, dtype="<u4").view(np.uint8).reshape(*lead, n // per_chunk, nbytes)
    lane = np.zeros(stream.shape[:-1], dtype=np.uint64)
    for k in range(nbytes):
        lane |= stream[..., k].astype(np.uint64) << np.uint64(8 * k)
    codes = np.empty((*lane.shape, per_chunk), dtype=np.uint8)
    mask = np.uint64((1 << bits) - 1)
    for j in range(per_chunk):
        codes[..., j] = (lane >> np.uint64(bits * j)) & mask
    return codes.reshape(*lead, n)
