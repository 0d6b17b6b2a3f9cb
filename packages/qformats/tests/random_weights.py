"""Random logical weights for layout tests (shared by the AWQ, Marlin, transcode and checkpoint tests)."""

from __future__ import annotations

import numpy as np
from qformats.logical import QuantizedWeight, default_g_idx, group_count


def random_weight(
    rng: np.random.Generator,
    out: int,
    in_: int,
    bits: int,
    group_size: int,
    *,
    sym: bool = False,
    act_order: bool = False,
    scale_dtype: type = np.float16,
) -> QuantizedWeight:
    """A valid ``QuantizedWeight`` with random codes, positive scales and (for ``sym``) the mid zero."""
    groups = group_count(in_, group_size)
    top = (1 << bits) - 1
    if sym:
        zeros = np.full((groups, out), 1 << (bits - 1), dtype=np.int32)
    else:
        zeros = rng.integers(0, top + 1, (groups, out)).astype(np.int32)
    g_idx = default_g_idx(in_, group_size)
    if act_order:
        g_idx = rng.permutation(g_idx).astype(np.int32)
    return QuantizedWeight(
        codes=rng.integers(0, top + 1, (out, in_)).astype(np.uint8),
        scales=(rng.random((groups, out)) * 0.1 + 0.001).astype(scale_dtype),
        zeros=zeros,
        g_idx=g_idx,
        bits=bits,
        group_size=group_size,
        sym=sym,
    )
