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

from ...layout_checks import raise_on_violations
from ...logical import QuantizedWeight, group_count
from ...violations import Violation
from ..registry import LayoutMeta
from ._base import MarlinTileLayout, TensorSpecs
from ._rules import act_order_reason
from ._tiles import unpermute_scales, untile_codes

RULE = "MARLIN"
TITLE = "GPTQ Marlin"
INDEX_DTYPES = ("int32", "int64")


class GptqMarlinLayout(MarlinTileLayout):
    """GPTQ codes laid out for Marlin kernels; readable back to the logical weight."""

    key = "marlin"
    title = TITLE
    rule = RULE

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = self.shape_reason(weight)
        if reason is not None:
            return reason
        mid = 1 << (weight.bits - 1)
        if not bool(np.all(weight.zeros == mid)):
            return f"{TITLE} is symmetric only (implicit zero {mid}); the weight has other zero points"
        return act_order_reason(TITLE, weight)

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        order = np.argsort(weight.g_idx, kind="stable").astype(np.int32)
        codes = weight.codes if weight.has_default_g_idx() else weight.codes[:, order]
        tensors = self.tiled(weight, pack_dtype, codes)
        tensors["g_idx"] = weight.g_idx[order].astype(np.int32)
        tensors["g_idx_sort_indices"] = order
        return tensors

    def extra_specs(self, meta: LayoutMeta, groups: int) -> TensorSpecs:
        k = meta.in_features
        return {"g_idx": (INDEX_DTYPES, (k,)), "g_idx_sort_indices": (INDEX_DTYPES, (k,))}

    def config_violations(self, meta: LayoutMeta) -> list[Violation]:
        return [] if meta.sym else [Violation(f"{RULE}-SYM", "config.sym", "True (implicit zero point)", "False")]

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        found = self.tile_violations(tensors, meta)
        if found is not None:
            return found
        k, groups = meta.in_features, group_count(meta.in_features, meta.group_size)
        found = []
        order = np.asarray(tensors["g_idx_sort_indices"])
        if not np.array_equal(np.sort(order), np.arange(k)):
            found.append(Violation(f"{RULE}-PERM", "g_idx_sort_indices", f"a permutation of 0..{k - 1}", "not one"))
        sorted_idx = np.asarray(tensors["g_idx"])
        if sorted_idx.size and (bool(np.any(np.diff(sorted_idx) < 0)) or int(sorted_idx.max()) >= groups):
            found.append(
                Violation(f"{RULE}-GIDX", "g_idx", f"sorted group ids in [0, {groups})", "unsorted or out of range")
            )
        return found

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
