"""AWQ GEMV_FAST (FORMAT ``gemv_fast``) and LLM-AWQ (FORMAT ``llm-awq``) layouts.

Both store (``ZW = zeros_width(in, gs)``, see :mod:`._gemv_groups`):

* ``qweight`` int16 ``[out / 4, in]``: 4-bit codes interleaved over 4 output rows (see :mod:`._interleave`).
* ``scales``  ``[ZW * 8, out]`` float16 (dtype kept), groups past ``in // gs`` zero.
* the **scaled zeros** ``-scale * zero`` (computed in float32, stored in the scales' dtype)
  ``[ZW * 8, out]``: named ``qzeros`` for ``gemv_fast`` and ``scaled_zeros`` for ``llm-awq``.

Native dequantization is ``code * scale + scaled_zero``. The integer zero is recovered as
``round(-scaled_zero / scale)``; :meth:`cannot_represent` refuses a weight for which that recovery would
not give the zero back (a zero scale with a non-zero zero, or an overflowing product), so a round trip
is bit exact.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...layout_checks import SCALE_DTYPES, check_tensors, raise_on_violations, require_packable, require_tensors
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from ..shape_dims import Dim, DimsFromShapes
from ._gemv_groups import group_size_reason, padding_violations, zeros_width
from ._interleave import INTERLEAVE, KSTRIDE, deinterleave_codes, interleave_codes
from ._rules import awq_representability, symmetric_zero_violations


def scaled_zeros(scales: np.ndarray, zeros: np.ndarray) -> np.ndarray:
    """``-(scales * zeros)`` computed in float32 and stored in ``scales.dtype`` (same shape)."""
    with np.errstate(over="ignore"):
        return (-(scales.astype(np.float32) * zeros.astype(np.float32))).astype(scales.dtype)


def recover_zeros(scales: np.ndarray, scaled: np.ndarray) -> np.ndarray:
    """Integer zeros ``round(-scaled / scale)`` (0 where the scale is 0), int32."""
    s = scales.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(s != 0, np.rint(-scaled.astype(np.float64) / np.where(s != 0, s, 1.0)), 0.0)
    z = np.nan_to_num(z, nan=-1.0, posinf=-1.0, neginf=-1.0)
    return z.astype(np.int64).clip(-(1 << 30), 1 << 30).astype(np.int32)


class AwqGemvFastLayout(DimsFromShapes):
    """The ``WQLinear_GEMVFast`` layout; :class:`LlmAwqLayout` differs only in the zero tensor's name."""

    key = "gemv_fast"
    zeros_name = "qzeros"
    title = "AWQ GEMV_FAST"
    in_dim = Dim("qweight", 1)
    out_dim = Dim("scales", 1)
    default_pack_dtype = "int16"

    @property
    def rule(self) -> str:
        return "AWQ-" + self.key.upper().replace("-", "_")

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = awq_representability(weight, self.title, (4,)) or group_size_reason(self.title, weight.group_size)
        if reason is not None:
            return reason
        out, in_ = weight.codes.shape
        if out % INTERLEAVE or in_ % KSTRIDE:
            return (
                f"{self.title} interleaves 4 output rows over 64-column strides; needs out_features % 4 == 0 and "
                f"in_features % 64 == 0, found out={out}, in={in_}"
            )
        back = recover_zeros(weight.scales, scaled_zeros(weight.scales, weight.zeros))
        bad = np.argwhere(back != weight.zeros)
        if bad.size:
            g, o = (int(v) for v in bad[0])
            return (
                f"{self.title} stores zeros as -scale*zero in {weight.scales.dtype}; group {g}, column {o} "
                f"(scale={weight.scales[g, o]!r}, zero={int(weight.zeros[g, o])}) would read back as "
                f"{int(back[g, o])}"
            )
        return None

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int16") -> dict[str, np.ndarray]:
        require_packable(self.title, pack_dtype, "int16", weight, self.cannot_represent)
        in_ = weight.in_features
        padded = zeros_width(in_, weight.group_size) * 8
        groups = weight.num_groups
        scales = np.zeros((padded, weight.out_features), dtype=weight.scales.dtype)
        scales[:groups] = weight.scales
        zeros = np.zeros_like(scales)
        zeros[:groups] = scaled_zeros(weight.scales, weight.zeros)
        return {"qweight": interleave_codes(weight.codes), "scales": scales, self.zeros_name: zeros}

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        found: list[Violation] = []
        rule = self.rule
        if meta.bits != 4:
            return [Violation(f"{rule}-BITS", "config.bits", "4", str(meta.bits))]
        if group_size_reason(self.title, meta.group_size) is not None:
            return [Violation(f"{rule}-GROUP", "config.group_size", "16, 32, 64 or >= 128", str(meta.group_size))]
        if meta.in_features % meta.group_size or meta.in_features % KSTRIDE or meta.out_features % INTERLEAVE:
            expected = "in % group_size == 0, in % 64 == 0, out % 4 == 0"
            found_dims = f"in={meta.in_features}, out={meta.out_features}"
            return [Violation(f"{rule}-DIMS", "config", expected, found_dims)]
        names = ("qweight", "scales", self.zeros_name)
        if not require_tensors(tensors, names, rule, found):
            other = "scaled_zeros" if self.zeros_name == "qzeros" else "qzeros"
            if other in tensors:
                found.append(
                    Violation(f"{rule}-NAME", other, f"scaled zeros named {self.zeros_name!r} for {self.key}", other)
                )
            return found
        padded = zeros_width(meta.in_features, meta.group_size) * 8
        specs = {
            "qweight": (("int16",), (meta.out_features // INTERLEAVE, meta.in_features)),
            "scales": (SCALE_DTYPES, (padded, meta.out_features)),
            self.zeros_name: (SCALE_DTYPES, (padded, meta.out_features)),
        }
        if not check_tensors(tensors, specs, rule, found):
            return found
        groups = meta.in_features // meta.group_size
        scales = np.asarray(tensors["scales"])
        stored = np.asarray(tensors[self.zeros_name])
        found.extend(padding_violations(rule, {"scales": scales, self.zeros_name: stored}, groups))
        zeros = recover_zeros(scales[:groups], stored[:groups])
        if bool(np.any((zeros < 0) | (zeros > 15))):
            found.append(Violation(f"{rule}-ZERO", self.zeros_name, "-scale*zero with zero in [0, 15]", "out of range"))
        elif not np.array_equal(scaled_zeros(scales[:groups], zeros).view(np.uint8), stored[:groups].view(np.uint8)):
            found.append(
                Violation(f"{rule}-ZERO", self.zeros_name, "exactly -scale*zero for an integer zero", "other values")
            )
        if meta.sym and not found:
            found.extend(symmetric_zero_violations(zeros, 4, self.zeros_name))
        return found

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        raise_on_violations(self.title, self.validate(tensors, meta))
        groups = meta.in_features // meta.group_size
        scales = np.array(np.asarray(tensors["scales"])[:groups], copy=True)
        zeros = recover_zeros(scales, np.asarray(tensors[self.zeros_name])[:groups])
        return QuantizedWeight(
            codes=deinterleave_codes(np.asarray(tensors["qweight"])),
            scales=scales,
            zeros=zeros,
            g_idx=default_g_idx(meta.in_features, meta.group_size),
            bits=4,
            group_size=meta.group_size,
            sym=meta.sym,
        )


class LlmAwqLayout(AwqGemvFastLayout):
    """The llm-awq (TinyChat) layout: GEMV_FAST packing with the zero tensor named ``scaled_zeros``."""

    key = "llm-awq"
    zeros_name = "scaled_zeros"
    title = "LLM-AWQ"
