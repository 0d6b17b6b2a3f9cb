"""AWQ GEMM layout (FORMAT ``gemm``): codes packed along the **output** axis.

Tensors (``G = in // group_size``, or 1 for ``group_size == -1``):

* ``qweight`` int32 ``[in, ceil(out*bits/32)]``: for 4-bit, each word holds 8 consecutive output
  columns with the AWQ order map (nibble slot k holds column ``[0,2,4,6,1,3,5,7][k]``, spec rule
  AWQ-004); other widths are a continuous little-endian bit stream along the output axis.
* ``qzeros``  int32 ``[G, ceil(out*bits/32)]``: true zero points (AWQ-005), packed like ``qweight``.
* ``scales``  ``[G, out]`` float16 (float32 kept when produced so).

Dequantization: ``W[o, i] = scales[i // gs, o] * (code[i, o] - zero[i // gs, o])``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...layout_checks import INT32_WORDS, check_tensors, raise_on_violations, require_packable
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from ..shape_dims import Dim, DimsFromShapes
from ._rules import SCALE_DTYPES, awq_group_count, awq_representability, symmetric_zero_violations
from ._words import (
    AWQ_ORDER,
    as_int32_words,
    pack_bitstream,
    pack_nibbles_ordered,
    unpack_bitstream,
    unpack_nibbles_ordered,
    words_for,
)

RULE = "AWQ-GEMM"


def pack_output_axis(codes_rows: np.ndarray, bits: int) -> np.ndarray:
    """Pack ``[R, out]`` codes along the output axis the GEMM way; returns int32 ``[R, ceil(out*bits/32)]``."""
    if bits == 4:
        return as_int32_words(pack_nibbles_ordered(codes_rows, AWQ_ORDER))
    return as_int32_words(pack_bitstream(codes_rows, bits))


def pack_gemm_qweight(codes: np.ndarray, bits: int) -> np.ndarray:
    """Logical codes ``[out, in]`` -> GEMM ``qweight`` int32 ``[in, ceil(out*bits/32)]``.

    For 4-bit the order-mapped nibble bytes are formed along ``out`` first and only the packed bytes
    (half the codes' size) are transposed.
    """
    if bits != 4:
        return pack_output_axis(np.ascontiguousarray(codes.T), bits)
    out_f, in_f = codes.shape
    blocks = codes.reshape(out_f // 8, 8, in_f)
    packed = np.empty((in_f, out_f // 8, 4), dtype=np.uint8)
    for j in range(4):
        lo = blocks[:, int(AWQ_ORDER[2 * j]), :]
        hi = blocks[:, int(AWQ_ORDER[2 * j + 1]), :]
        packed[:, :, j] = (lo | (hi << np.uint8(4))).T
    return packed.reshape(in_f, -1).view("<i4").astype(np.int32, copy=False)


def unpack_gemm_qweight(qweight: np.ndarray, bits: int, out_features: int) -> np.ndarray:
    """Inverse of :func:`pack_gemm_qweight`: ``qweight`` -> uint8 codes ``[out, in]``."""
    if bits != 4:
        return np.ascontiguousarray(unpack_output_axis(qweight, bits, out_features).T)
    in_f = qweight.shape[0]
    as_bytes = np.ascontiguousarray(qweight).astype("<i4", copy=False).view(np.uint8).reshape(in_f, -1, 4)
    blocks = np.empty((out_features // 8, 8, in_f), dtype=np.uint8)
    for j in range(4):
        plane = as_bytes[:, :, j].T
        blocks[:, int(AWQ_ORDER[2 * j]), :] = plane & np.uint8(0xF)
        blocks[:, int(AWQ_ORDER[2 * j + 1]), :] = plane >> np.uint8(4)
    return blocks.reshape(out_features, in_f)


def unpack_output_axis(words: np.ndarray, bits: int, out_features: int) -> np.ndarray:
    """Inverse of :func:`pack_output_axis`: int32 ``[R, words]`` -> uint8 codes ``[R, out]``."""
    if bits == 4:
        return unpack_nibbles_ordered(words.view(np.uint32), AWQ_ORDER)[:, :out_features]
    return unpack_bitstream(words.view(np.uint32), bits, out_features)


class AwqGemmLayout(DimsFromShapes):
    """The AutoAWQ ``WQLinear_GEMM`` checkpoint layout."""

    key = "gemm"
    in_dim = Dim("qweight", 0)
    out_dim = Dim("scales", 1)
    bits_allowed = (2, 3, 4, 5, 6, 7, 8)

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        reason = awq_representability(weight, "AWQ GEMM", self.bits_allowed)
        if reason is None and weight.bits == 4 and weight.out_features % 8:
            reason = (
                f"AWQ GEMM 4-bit packs 8 output columns per word with the order map (AWQ-004); "
                f"out_features={weight.out_features} is not a multiple of 8"
            )
        return reason

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        require_packable("AWQ GEMM", pack_dtype, "int32", weight, self.cannot_represent)
        zeros = np.asarray(weight.zeros)
        return {
            "qweight": pack_gemm_qweight(weight.codes, weight.bits),
            "qzeros": pack_output_axis(zeros.astype(np.uint8), weight.bits),
            "scales": np.array(weight.scales, copy=True),
        }

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        found: list[Violation] = []
        if meta.bits not in self.bits_allowed:
            found.append(Violation(f"{RULE}-BITS", "config.bits", "2..8", str(meta.bits)))
            return found
        if meta.group_size != -1 and meta.in_features % meta.group_size:
            found.append(
                Violation(
                    f"{RULE}-GROUP",
                    "config.group_size",
                    f"a divisor of in_features={meta.in_features}",
                    str(meta.group_size),
                )
            )
            return found
        if meta.bits == 4 and meta.out_features % 8:
            found.append(
                Violation("AWQ-004", "qweight", "out_features % 8 == 0 (order-mapped nibbles)", str(meta.out_features))
            )
            return found
        groups = awq_group_count(meta.in_features, meta.group_size)
        width = words_for(meta.out_features, meta.bits)
        specs = {
            "qweight": (INT32_WORDS, (meta.in_features, width)),
            "qzeros": (INT32_WORDS, (groups, width)),
            "scales": (SCALE_DTYPES, (groups, meta.out_features)),
        }
        if not check_tensors(tensors, specs, RULE, found):
            return found
        found.extend(self._padding_violations(tensors, meta))
        if meta.sym:
            zeros = unpack_output_axis(np.asarray(tensors["qzeros"]), meta.bits, meta.out_features)
            found.extend(symmetric_zero_violations(zeros, meta.bits, "qzeros"))
        return found

    def _padding_violations(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        used = meta.out_features * meta.bits
        spare = words_for(meta.out_features, meta.bits) * 32 - used
        if meta.bits == 4 or spare == 0:
            return []
        mask = np.uint32(((1 << spare) - 1) << (32 - spare))
        found = []
        for name in ("qweight", "qzeros"):
            last = np.asarray(tensors[name]).view(np.uint32)[:, -1]
            if bool(np.any(last & mask)):
                found.append(Violation(f"{RULE}-PAD", name, f"the top {spare} bits of the last word zero", "set bits"))
        return found

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        raise_on_violations("AWQ GEMM", self.validate(tensors, meta))
        codes = unpack_gemm_qweight(np.asarray(tensors["qweight"]), meta.bits, meta.out_features)
        zeros = unpack_output_axis(np.asarray(tensors["qzeros"]), meta.bits, meta.out_features)
        return QuantizedWeight(
            codes=codes,
            scales=np.array(tensors["scales"], copy=True),
            zeros=zeros.astype(np.int32),
            g_idx=default_g_idx(meta.in_features, meta.group_size),
            bits=meta.bits,
            group_size=meta.group_size,
            sym=meta.sym,
        )
