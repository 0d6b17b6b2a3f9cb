"""What a layout stores for a module of a given shape and width, measured by packing a zero probe.

:func:`zero_probe` is a ``QuantizedWeight`` of all-zero codes (unit scales, the symmetric zero point) of the
module's real ``[out, in]``; :func:`stored_bits` packs it with the layout and counts every tensor the layout
writes (codes, scales, zeros, ``g_idx`` or whatever the layout holds), so the count is the layout's own and
never a formula kept beside it.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from ..logical import QuantizedWeight, default_g_idx, group_count
from .registry import Layout, get_layout


def zero_probe(out_features: int, in_features: int, bits: int, group_size: int, sym: bool = True) -> QuantizedWeight:
    """A ``[out, in]`` weight of zero codes, float16 unit scales ``[G, out]`` and the zero point ``2**(bits-1)``."""
    groups = group_count(in_features, group_size)
    return QuantizedWeight(
        codes=np.zeros((out_features, in_features), dtype=np.uint8),
        scales=np.ones((groups, out_features), dtype=np.float16),
        zeros=np.full((groups, out_features), 1 << (bits - 1), dtype=np.int32),
        g_idx=default_g_idx(in_features, group_size),
        bits=bits,
        group_size=group_size,
        sym=sym,
    )


def stored_bits(
    layout: str | Layout,
    out_features: int,
    in_features: int,
    bits: int,
    group_size: int,
    *,
    sym: bool = True,
    pack_dtype: str = "int32",
) -> int:
    """Bits ``layout`` (a registry key or a layout) writes for one ``[out, in]`` module at ``bits`` / ``group_size``
    (every packed tensor's bytes times 8). Raises :class:`~qformats.errors.LayoutError` with the layout's reason
    when it cannot hold such a module."""
    chosen = get_layout(layout) if isinstance(layout, str) else layout
    probe = zero_probe(out_features, in_features, bits, group_size, sym)
    reason = chosen.cannot_represent(probe)
    if reason is not None:
        raise LayoutError(
            f"layout {chosen.key!r} cannot hold a [{out_features} x {in_features}] module at {bits}-bit group "
            f"{group_size}: {reason}"
        )
    return 8 * sum(int(np.asarray(a).nbytes) for a in chosen.pack(probe, pack_dtype=pack_dtype).values())
