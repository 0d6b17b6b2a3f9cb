"""QQQ's Marlin-style tile permutation of 4-bit codes, both directions (pure numpy).

Shapes: codes ``[K=in, N=out]`` nibbles in ``[0, 15]``; words int32 ``B [K / 16, N * 2]`` (8 nibbles a
word). Requires ``K % 16 == 0`` and ``N % 64 == 0``.

The codes are split into 16x16 (K x N) tiles laid out tile-row by tile-row (``[K/16, N*16]``); every
1024-value chunk is gathered by a permutation, then word ``c`` of a row takes columns ``8c .. 8c+7`` of
the permuted row, nibble ``i`` at shift ``4 i``. The permutation is QQQ's own (not GPTQ Marlin's): entry
``8 j + e`` of the 64-entry fragment ``i`` (``i < 32``) reads tile row ``4 (i % 4) + r`` and column
``i // 4 + 8 b`` (``e = 4 b + r``), fragments repeat over the four 256-value quarters, and the 8 values
of each word are then reordered by ``[0, 2, 4, 6, 1, 3, 5, 7]`` (grouped) or ``[4, 0, 5, 1, 6, 2, 7, 3]``
(per-channel).

Scales: ``s_group [G, N]`` are permuted every 64 values by ``i + 8 j`` and ``s_channel [1, N]`` every 32
values by ``2 i + {0, 1, 8, 9, 16, 17, 24, 25}`` (the Marlin scale permutations).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..marlin._tiles import _pack_cols, _unpack_cols

TILE = 16
WORD_ORDER = {"grouped": np.array([0, 2, 4, 6, 1, 3, 5, 7]), "channel": np.array([4, 0, 5, 1, 6, 2, 7, 3])}


@lru_cache(maxsize=2)
def weight_perm(mode: str) -> np.ndarray:
    """The 1024-entry gather applied to each tiled chunk (``mode``: ``"grouped"`` or ``"channel"``)."""
    perm: list[int] = []
    for i in range(32):
        frag = [16 * (4 * (i % 4) + r) + i // 4 + 8 * block for block in (0, 1) for r in range(4)]
        for quarter in range(4):
            perm.extend(p + 256 * quarter for p in frag)
    order = WORD_ORDER[mode]
    return np.array(perm).reshape(-1, order.size)[:, order].ravel()


def tile_nibbles(nibbles: np.ndarray, mode: str) -> np.ndarray:
    """Nibbles ``[N, K]`` (logical orientation, uint8) -> words int32 ``[K / 16, N * 2]``."""
    n, k = nibbles.shape
    q = np.ascontiguousarray(nibbles.T)
    t = q.reshape(k // TILE, TILE, n // TILE, TILE).transpose(0, 2, 1, 3).reshape(k // TILE, n * TILE)
    perm = weight_perm(mode)
    t = np.ascontiguousarray(t.reshape(-1, perm.size)[:, perm]).reshape(k // TILE, n * TILE)
    return _pack_cols(t, 4)


def untile_nibbles(words: np.ndarray, mode: str, k: int, n: int) -> np.ndarray:
    """Inverse of :func:`tile_nibbles`: words -> uint8 nibbles ``[N, K]``."""
    t = _unpack_cols(np.asarray(words), 4)
    inverse = np.argsort(weight_perm(mode))
    t = t.reshape(-1, inverse.size)[:, inverse].reshape(k // TILE, n // TILE, TILE, TILE)
    return np.ascontiguousarray(t.transpose(1, 3, 0, 2).reshape(n, k))
