"""AWQ Marlin tile layout (documented key ``awq_marlin``): 4/8-bit codes with explicit zero points.

Tensors (``K = in``, ``N = out``, ``pf = 32 / bits``, ``G = K // group_size`` or 1):

* ``qweight`` int32 ``[K / 16, N * 16 / pf]``: codes in Marlin tiles (natural row order; AWQ has no act-order).
* ``scales``  ``[G, N]`` (dtype kept) in Marlin scale order.
* ``qzeros``  int32 ``[G, N / pf]``: true zero points, grouped scale permutation, bit-width interleave,
  sequential packing along N (see :mod:`._tiles`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...layout_checks import INT32_WORDS, raise_on_violations
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from ._base import MarlinTileLayout, TensorSpecs
from ._tiles import pack_zero_points, unpack_zero_points, unpermute_scales, untile_codes

RULE = "AWQ-MARLIN"
TITLE = "AWQ Marlin"


class AwqMarlinLayout(MarlinTileLayout):
    """AWQ codes and zero points laid out for Marlin kernels; readable back to the logical weight."""

    key = "awq_marlin"
    title = TITLE
    rule = RULE

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = self.shape_reason(weight)
        if reason is None and not weight.has_default_g_idx():
            reason = f"{TITLE} has no g_idx tensor, so it cannot hold an act-order (permuted) group map"
        return reason

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        tensors = self.tiled(weight, pack_dtype, weight.codes)
        tensors["qzeros"] = pack_zero_points(np.asarray(weight.zeros), weight.bits)
        return tensors

    def extra_specs(self, meta: LayoutMeta, groups: int) -> TensorSpecs:
        return {"qzeros": (INT32_WORDS, (groups, meta.out_features * meta.bits // 32))}

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        return self.tile_violations(tensors, meta) or []

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        raise_on_violations(TITLE, self.validate(tensors, meta))
        k, n = meta.in_features, meta.out_features
        codes = untile_codes(np.asarray(tensors["qweight"]), meta.bits, k, n)
        zeros = unpack_zero_points(np.asarray(tensors["qzeros"]), meta.bits, n)
        return QuantizedWeight(
            codes=codes,
            scales=unpermute_scales(np.asarray(tensors["scales"]), meta.group_size, k),
            zeros=zeros.astype(np.int32),
            g_idx=default_g_idx(k, meta.group_size),
            bits=meta.bits,
            group_size=meta.group_size,
            sym=meta.sym,
        )
