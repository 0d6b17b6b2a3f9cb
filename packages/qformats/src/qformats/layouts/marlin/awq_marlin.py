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

from ...errors import UnsupportedLayoutError
from ...layout_checks import check_dtype, check_shape, raise_on_violations, require_dims, require_tensors
from ...logical import QuantizedWeight, default_g_idx, group_count
from ...violations import Violation
from ..registry import LayoutMeta
from ._rules import dims_violation, shape_reason
from ._tiles import pack_zero_points, permute_scales, tile_codes, unpack_zero_points, unpermute_scales, untile_codes

RULE = "AWQ-MARLIN"
TITLE = "AWQ Marlin"
SCALE_DTYPES = ("float16", "float32", "bfloat16")


class AwqMarlinLayout:
    """AWQ codes and zero points laid out for Marlin kernels; readable back to the logical weight."""

    key = "awq_marlin"

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = shape_reason(TITLE, weight.bits, weight.group_size, weight.in_features, weight.out_features)
        if reason is None and not weight.has_default_g_idx():
            reason = f"{TITLE} has no g_idx tensor, so it cannot hold an act-order (permuted) group map"
        return reason

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        if pack_dtype != "int32":
            raise UnsupportedLayoutError(f"{TITLE} packs int32 words only; pack_dtype={pack_dtype!r}")
        reason = self.cannot_represent(weight)
        if reason is not None:
            raise UnsupportedLayoutError(reason)
        return {
            "qweight": tile_codes(weight.codes, weight.bits),
            "scales": permute_scales(weight.scales, weight.group_size, weight.in_features),
            "qzeros": pack_zero_points(np.asarray(weight.zeros), weight.bits),
        }

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        k, n = meta.in_features, meta.out_features
        found = dims_violation(RULE, shape_reason(TITLE, meta.bits, meta.group_size, k, n))
        if found or not require_tensors(tensors, ("qweight", "scales", "qzeros"), RULE, found):
            return found
        pf = 32 // meta.bits
        groups = group_count(k, meta.group_size)
        check_dtype(tensors, "qweight", ("int32",), RULE, found)
        check_dtype(tensors, "qzeros", ("int32",), RULE, found)
        check_dtype(tensors, "scales", SCALE_DTYPES, RULE, found)
        check_shape(tensors, "qweight", (k // 16, n * 16 // pf), RULE, found)
        check_shape(tensors, "qzeros", (groups, n // pf), RULE, found)
        check_shape(tensors, "scales", (groups, n), RULE, found)
        return found

    def infer_meta(
        self,
        tensors: Mapping[str, np.ndarray],
        *,
        bits: int,
        group_size: int,
        sym: bool = True,
        pack_dtype: str = "int32",
    ) -> LayoutMeta:
        """Logical ``in``/``out`` read from the tensor shapes (raises LayoutError naming a missing tensor)."""
        require_dims(self.key, tensors, ("qweight", "scales"))
        in_ = int(np.shape(tensors["qweight"])[0]) * 16
        out = int(np.shape(tensors["scales"])[1])
        return LayoutMeta(bits, group_size, in_, out, sym, pack_dtype)

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
