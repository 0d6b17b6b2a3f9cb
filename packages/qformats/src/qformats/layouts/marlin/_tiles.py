"""Marlin tile permutations as pure numpy transforms, both directions.

Shapes: ``q`` is ``[K=in, N=out]`` integer codes; Marlin words are int32 ``[K / 16, N * 16 / pf]`` with
``pf = 32 / bits`` (8 for 4-bit, 4 for 8-bit). Scales are ``[G, N]``; zero points (AWQ Marlin) are packed
int32 ``[G, N / pf]``. Requires ``K % 16 == 0`` and ``N % 64 == 0``.

Weights: split into 16x16 (K x N) tiles laid out tile-row by tile-row (``[K/16, N*16]``), apply the
1024-entry mma fragment permutation to every 1024-value chunk, then pack ``pf`` values per word taking
columns ``i::pf`` at shift ``bits * i``. The fragment permutation interleaves rows ``{0,1,8,9}`` style
offsets and, within 8 (4-bit) or 4 (8-bit) values, the order ``[0,2,4,6,1,3,5,7]`` / ``[0,2,1,3]``.

Scales: grouped (``group_size != -1`` and ``< K``) permute every 64 values by ``i + 8j``; channelwise
permute every 32 values by ``2i + {0,1,8,9,16,17,24,25}``. Zero points always use the grouped scale
permutation, then the bit-width interleave, then sequential packing along N.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

TILE = 16
_INTERLEAVE = {4: np.array([0, 2, 4, 6, 1, 3, 5, 7]), 8: np.array([0, 2, 1, 3])}


@lru_cache(maxsize=4)
def weight_perm(bits: int) -> np.ndarray:
    """The 1024-entry permutation applied to each chunk of tiled weight values."""
    perm: list[int] = []
    for i in range(32):
        col = i // 4
        frag: list[int] = []
        for block in (0, 1):
            for row in (2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1):
                frag.append(16 * row + col + 8 * block)
        for j in range(4):
            perm.extend(p + 256 * j for p in frag)
    inter = _INTERLEAVE[bits]
    return np.array(perm).reshape(-1, len(inter))[:, inter].ravel()


@lru_cache(maxsize=1)
def scale_perms() -> tuple[np.ndarray, np.ndarray]:
    """``(grouped, channelwise)`` scale permutations of lengths 64 and 32."""
    grouped = [i + 8 * j for i in range(8) for j in range(8)]
    single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return np.array(grouped), np.array(single)


def _pack_cols(values: np.ndarray, bits: int) -> np.ndarray:
    """Sequential packing along columns: word c holds values ``c*pf .. c*pf+pf-1``, value i at shift ``bits*i``."""
    if bits == 8:
        return np.ascontiguousarray(values.astype(np.uint8)).view("<u4").astype(np.uint32).view(np.int32)
    if bits == 4:
        v = np.ascontiguousarray(values.astype(np.uint8, copy=False))
        pairs = v.reshape(v.shape[0], -1, 2)
        packed = pairs[:, :, 0] | (pairs[:, :, 1] << np.uint8(4))
        return np.ascontiguousarray(packed).view("<u4").astype(np.uint32).view(np.int32)
    pf = 32 // bits
    v = values.astype(np.uint32)
    words = np.zeros((v.shape[0], v.shape[1] // pf), dtype=np.uint32)
    for i in range(pf):
        words |= v[:, i::pf] << np.uint32(bits * i)
    return words.view(np.int32)


def _unpack_cols(words: np.ndarray, bits: int) -> np.ndarray:
    if bits in (4, 8):
        as_bytes = np.ascontiguousarray(words).astype("<i4", copy=False).view(np.uint8).reshape(words.shape[0], -1)
        if bits == 8:
            return as_bytes.copy()
        out = np.empty((as_bytes.shape[0], as_bytes.shape[1], 2), dtype=np.uint8)
        out[:, :, 0] = as_bytes & np.uint8(0xF)
        out[:, :, 1] = as_bytes >> np.uint8(4)
        return out.reshape(as_bytes.shape[0], -1)
    pf = 32 // bits
    w = np.ascontiguousarray(words).view(np.uint32)
    out = np.empty((w.shape[0], w.shape[1] * pf), dtype=np.uint8)
    mask = np.uint32((1 << bits) - 1)
    for i in range(pf):
        out[:, i::pf] = ((w >> np.uint32(bits * i)) & mask).astype(np.uint8)
    return out


def tile_weights(q: np.ndarray, bits: int) -> np.ndarray:
    """Codes ``[K, N]`` -> Marlin words int32 ``[K/16, N*16/pf]`` (reference formulation: tile, then gather)."""
    k, n = q.shape
    t = q.reshape(k // TILE, TILE, n // TILE, TILE).transpose(0, 2, 1, 3).reshape(k // TILE, n * TILE)
    perm = weight_perm(bits)
    t = t.reshape(-1, perm.size)[:, perm].reshape(k // TILE, n * TILE)
    return _pack_cols(t, bits)


# Axis orders of the fused tile transform: codes [N, K] viewed as (N/64, j, b, c, K/16, h, m, l) where
# n = 64*nb + 16*j + 8*b + c and k = 16*kt + 8*h + 2*m + l; the Marlin value order is (kt, nb, c, m, j, ...)
# followed by (l, b, h) for 4-bit and (b, l, h) for 8-bit -- the same order ``weight_perm`` produces.
_TILE_AXES = {4: (4, 0, 3, 6, 1, 7, 2, 5), 8: (4, 0, 3, 6, 1, 2, 7, 5)}
_UNTILE_AXES = {4: (1, 4, 6, 2, 0, 7, 3, 5), 8: (1, 4, 5, 2, 0, 7, 3, 6)}


def tile_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes ``[N, K]`` (the logical orientation) -> Marlin words, equal to ``tile_weights(codes.T, bits)``.

    One transpose of the uint8 codes replaces the tile transpose plus the 1024-entry gather.
    """
    n, k = codes.shape
    v = codes.astype(np.uint8, copy=False).reshape(n // 64, 4, 2, 8, k // TILE, 2, 4, 2)
    t = np.ascontiguousarray(v.transpose(_TILE_AXES[bits])).reshape(k // TILE, n * TILE)
    return _pack_cols(t, bits)


def untile_codes(words: np.ndarray, bits: int, k: int, n: int) -> np.ndarray:
    """Inverse of :func:`tile_codes`: Marlin words -> uint8 codes ``[N, K]``."""
    t = _unpack_cols(words, bits)
    inner = (8, 4, 4, 2, 2, 2)
    v = t.reshape(k // TILE, n // 64, *inner).transpose(_UNTILE_AXES[bits])
    return np.ascontiguousarray(v).reshape(n, k)


def is_grouped(group_size: int, k: int) -> bool:
    """Marlin uses the grouped scale permutation when ``group_size != -1`` and ``group_size < K``."""
    return group_size != -1 and group_size < k


def permute_scales(scales: np.ndarray, group_size: int, k: int) -> np.ndarray:
    """Scales ``[G, N]`` -> Marlin order (same shape and dtype)."""
    grouped, single = scale_perms()
    perm = grouped if is_grouped(group_size, k) else single
    return np.ascontiguousarray(scales.reshape(-1, perm.size)[:, perm].reshape(scales.shape))


def unpermute_scales(scales: np.ndarray, group_size: int, k: int) -> np.ndarray:
    """Inverse of :func:`permute_scales`."""
    grouped, single = scale_perms()
    inverse = np.argsort(grouped if is_grouped(group_size, k) else single)
    return np.ascontiguousarray(scales.reshape(-1, inverse.size)[:, inverse].reshape(scales.shape))


def pack_zero_points(zeros: np.ndarray, bits: int) -> np.ndarray:
    """Integer zeros ``[G, N]`` -> Marlin zero words int32 ``[G, N/pf]``."""
    grouped, _ = scale_perms()
    inter = _INTERLEAVE[bits]
    z = zeros.reshape(-1, grouped.size)[:, grouped]
    z = z.reshape(-1, inter.size)[:, inter].reshape(zeros.shape)
    return _pack_cols(z, bits)


def unpack_zero_points(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_zero_points`: words -> uint8 zeros ``[G, N]``."""
    grouped, _ = scale_perms()
    inter = _INTERLEAVE[bits]
    z = _unpack_cols(words, bits)
    shape = z.shape
    z = z.reshape(-1, inter.size)[:, np.argsort(inter)].reshape(-1, grouped.size)[:, np.argsort(grouped)]
    return np.ascontiguousarray(z.reshape(shape))[:, :n]
