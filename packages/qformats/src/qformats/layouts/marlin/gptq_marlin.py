"""GPTQ Marlin tile layout (FORMAT ``marlin``): symmetric 4/8-bit codes in Marlin tiles.

Tensors (``K = in``, ``N = out``, ``pf = 32 / bits``):

* ``qweight`` int32 ``[K / 16, N * 16 / pf]``: codes, rows first sorted by ``g_idx_sort_indices``, in
  Marlin tiles (see :mod:`._tiles`).
* ``scales``  ``[G, N]`` (dtype kept) in Marlin scale order.
* ``g_idx``   int32 ``[K]``: the **sorted** group index (what Marlin kernels consume).
* ``g_idx_sort_indices`` int32 ``[K]``: the stable argsort of the original ``g_idx``.

The zero point is implicit: ``2**(bits-1)`` (Marlin types uint4b8 / uint8b128), so only symmetric
weights with exactly that zero can be stored.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import UnsupportedLayoutError
from ...layout_checks import check_dtype, check_shape, raise_on_violations, require_dims, require_tensors
from ...logical import QuantizedWeight, group_count
from ...violations import Violation
from ..registry import LayoutMeta
from ._rules import act_order_reason, dims_violation, shape_reason
from ._tiles import permute_scales, tile_codes, unpermute_scales, untile_codes

RULE = "MARLIN"
TITLE = "GPTQ Marlin"
SCALE_DTYPES = ("float16", "float32", "bfloat16")


class GptqMarlinLayout:
    """GPTQ codes laid out for Marlin kernels; readable back to the logical weight."""

    key = "marlin"

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = shape_reason(TITLE, weight.bits, weight.group_size, weight.in_features, weight.out_features)
        if reason is not None:
            return reason
        mid = 1 << (weight.bits - 1)
        if not bool(np.all(weight.zeros == mid)):
            return f"{TITLE} is symmetric only (implicit zero {mid}); the weight has other zero points"
        return act_order_reason(TITLE, weight)

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        if pack_dtype != "int32":
            raise UnsupportedLayoutError(f"{TITLE} packs int32 words only; pack_dtype={pack_dtype!r}")
        reason = self.cannot_represent(weight)
        if reason is not None:
            raise UnsupportedLayoutError(reason)
        order = np.argsort(weight.g_idx, kind="stable").astype(np.int32)
        codes = weight.codes if weight.has_default_g_idx() else weight.codes[:, order]
        return {
            "qweight": tile_codes(codes, weight.bits),
            "scales": permute_scales(weight.scales, weight.group_size, weight.in_features),
            "g_idx": weight.g_idx[order].astype(np.int32),
            "g_idx_sort_indices": order,
        }

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        k, n = meta.in_features, meta.out_features
        found = dims_violation(RULE, shape_reason(TITLE, meta.bits, meta.group_size, k, n))
        if found:
            return found
        if not meta.sym:
            return [Violation(f"{RULE}-SYM", "config.sym", "True (implicit zero point)", "False")]
        if not require_tensors(tensors, ("qweight", "scales", "g_idx", "g_idx_sort_indices"), RULE, found):
            return found
        pf = 32 // meta.bits
        groups = group_count(k, meta.group_size)
        check_dtype(tensors, "qweight", ("int32",), RULE, found)
        check_dtype(tensors, "scales", SCALE_DTYPES, RULE, found)
        check_dtype(tensors, "g_idx", ("int32", "int64"), RULE, found)
        check_dtype(tensors, "g_idx_sort_indices", ("int32", "int64"), RULE, found)
        check_shape(tensors, "qweight", (k // 16, n * 16 // pf), RULE, found)
        check_shape(tensors, "scales", (groups, n), RULE, found)
        check_shape(tensors, "g_idx", (k,), RULE, found)
        check_shape(tensors, "g_idx_sort_indices", (k,), RULE, found)
        if found:
            return found
        order = np.asarray(tensors["g_idx_sort_indices"])
        if not np.array_equal(np.sort(order), np.arange(k)):
            found.append(Violation(f"{RULE}-PERM", "g_idx_sort_indices", f"a permutation of 0..{k - 1}", "not one"))
        sorted_idx = np.asarray(tensors["g_idx"])
        if sorted_idx.size and (bool(np.any(np.diff(sorted_idx) < 0)) or int(sorted_idx.max()) >= groups):
            found.append(
                Violation(f"{RULE}-GIDX", "g_idx", f"sorted group ids in [0, {groups})", "unsorted or out of range")
            )
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
        order = np.asarray(tensors["g_idx_sort_indices"]).astype(np.intp)
        codes_sorted = untile_codes(np.asarray(tensors["qweight"]), meta.bits, k, n)
        if np.array_equal(order, np.arange(k)):
            codes = codes_sorted
        else:
            codes = np.empty_like(codes_sorted)
            codes[:, order] = codes_sorted
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[order] = np.asarray(tensors["g_idx"]).astype(np.int32)
        scales = unpermute_scales(np.asarray(tensors["scales"]), meta.group_size, k)
        return QuantizedWeight(
            codes=codes,
            scales=scales,
            zeros=np.full(scales.shape, 1 << (meta.bits - 1), dtype=np.int32),
            g_idx=g_idx,
            bits=meta.bits,
            group_size=meta.group_size,
            sym=True,
        )
