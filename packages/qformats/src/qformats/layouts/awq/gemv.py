"""AWQ GEMV layout (FORMAT ``gemv``): 4-bit codes packed along the **input** axis, output-major.

Tensors (``G = in // gs``, ``ZW = zeros_width(in, gs)``, see :mod:`._gemv_groups`):

* ``qweight`` int32 ``[out, in / 8]``: word c of row o holds input columns ``8c .. 8c+7``, column
  ``8c + j`` at shift ``4j`` (sequential nibbles, no order map).
* ``qzeros``  int32 ``[out, ZW]``: true zero points (AWQ-005) of ``ZW * 8`` groups, sequential nibbles,
  groups past ``G`` zero.
* ``scales``  float16 ``[out, ZW * 8]``: groups past ``G`` zero.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...layout_checks import INT32_WORDS, SCALE_DTYPES, check_tensors, raise_on_violations, require_packable
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from ..shape_dims import Dim, DimsFromShapes
from ._gemv_groups import group_size_reason, padding_violations, zeros_width
from ._rules import awq_representability, symmetric_zero_violations
from ._words import as_int32_words, pack_sequential, unpack_sequential

RULE = "AWQ-GEMV"


class AwqGemvLayout(DimsFromShapes):
    """The AutoAWQ ``WQLinear_GEMV`` checkpoint layout (4-bit only)."""

    key = "gemv"
    in_dim = Dim("qweight", 1, 8)
    out_dim = Dim("qweight", 0)

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = awq_representability(weight, "AWQ GEMV", (4,)) or group_size_reason("AWQ GEMV", weight.group_size)
        if reason is None and weight.in_features % 8:
            reason = f"AWQ GEMV packs 8 input columns per word; in_features={weight.in_features} is not a multiple of 8"
        return reason

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        require_packable("AWQ GEMV", pack_dtype, "int32", weight, self.cannot_represent)
        out, in_ = weight.codes.shape
        width = zeros_width(in_, weight.group_size)
        groups = weight.num_groups
        zeros = np.zeros((out, width * 8), dtype=np.uint8)
        zeros[:, :groups] = weight.zeros.T
        scales = np.zeros((out, width * 8), dtype=weight.scales.dtype)
        scales[:, :groups] = weight.scales.T
        return {
            "qweight": as_int32_words(pack_sequential(weight.codes, 4)),
            "qzeros": as_int32_words(pack_sequential(zeros, 4)),
            "scales": scales,
        }

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        found: list[Violation] = []
        if meta.bits != 4:
            return [Violation(f"{RULE}-BITS", "config.bits", "4", str(meta.bits))]
        reason = group_size_reason("AWQ GEMV", meta.group_size)
        if reason is not None:
            return [Violation(f"{RULE}-GROUP", "config.group_size", "16, 32, 64 or >= 128", str(meta.group_size))]
        if meta.in_features % meta.group_size or meta.in_features % 8:
            return [
                Violation(f"{RULE}-GROUP", "config.in_features", "divisible by group_size and 8", str(meta.in_features))
            ]
        width = zeros_width(meta.in_features, meta.group_size)
        specs = {
            "qweight": (INT32_WORDS, (meta.out_features, meta.in_features // 8)),
            "qzeros": (INT32_WORDS, (meta.out_features, width)),
            "scales": (SCALE_DTYPES, (meta.out_features, width * 8)),
        }
        if not check_tensors(tensors, specs, RULE, found):
            return found
        groups = meta.in_features // meta.group_size
        zeros = unpack_sequential(np.asarray(tensors["qzeros"]).view(np.uint32), 4)
        padded = {"qzeros": zeros.T, "scales": np.asarray(tensors["scales"]).T}
        found.extend(padding_violations(RULE, padded, groups))
        if meta.sym:
            found.extend(symmetric_zero_violations(zeros[:, :groups], 4, "qzeros"))
        return found

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        raise_on_violations("AWQ GEMV", self.validate(tensors, meta))
        groups = meta.in_features // meta.group_size
        zeros = unpack_sequential(np.asarray(tensors["qzeros"]).view(np.uint32), 4)[:, :groups]
        return QuantizedWeight(
            codes=unpack_sequential(np.asarray(tensors["qweight"]).view(np.uint32), 4),
            scales=np.ascontiguousarray(np.asarray(tensors["scales"])[:, :groups].T),
            zeros=np.ascontiguousarray(zeros.T).astype(np.int32),
            g_idx=default_g_idx(meta.in_features, meta.group_size),
            bits=4,
            group_size=meta.group_size,
            sym=meta.sym,
        )
