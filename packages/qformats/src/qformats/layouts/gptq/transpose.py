"""A cache-friendly transpose of 2-D word arrays (qweight is packed down rows, codes are row-major).

numpy's plain ``ascontiguousarray(a.T)`` walks one side with a stride of a whole row, which thrashes
the cache for multi-megabyte qweights. Copying tile by tile keeps both sides in cache; the tile loop
runs over a few thousand tiles, not over elements.
"""

from __future__ import annotations

import numpy as np


def _tile(rows: int, cols: int) -> tuple[int, int]:
    """Tile (source rows, source columns) of about 4096 elements, long along the wide side."""
    if cols >= rows:
        return 8, 512
    return 32, 128


def transpose_2d(a: np.ndarray) -> np.ndarray:
    """A new C-contiguous array equal to ``a.T`` for a 2-D ``a`` (``a`` is not modified)."""
    a = np.asarray(a)
    rows, cols = a.shape
    out = np.empty((cols, rows), dtype=a.dtype)
    if rows * cols <= 1 << 16:
        out[...] = a.T
        return out
    tr, tc = _tile(rows, cols)
    for r in range(0, rows, tr):
        block = a[r : r + tr]
        for c in range(0, cols, tc):
            out[c : c + tc, r : r + tr] = block[:, c : c + tc].T
    return out
