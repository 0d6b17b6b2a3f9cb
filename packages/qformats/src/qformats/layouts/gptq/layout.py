"""The three GPTQ layouts: ``gptq`` (v1 zeros), ``gptq_v2`` (true zeros) and ``gptq_p`` (planar).

Tensors of one module (checkpoint keys without the module prefix):

* ``qweight`` ``[words(in), out]`` pack_dtype -- codes packed down the input axis (rows).
* ``qzeros``  ``[G, words(out)]`` pack_dtype -- zero points packed along the output axis.
* ``scales``  ``[G, out]`` float (dtype kept as given).
* ``g_idx``   ``[in]`` int32 -- group of each input column (optional on read: default ``i // gs``).

``words(n)`` is ``ceil(n * b / W)`` whole words for 2/4/8-bit (W = word bits), ``n * 3 / 32`` for
3-bit and ``n * b / 32`` for planar (both need ``n % 32 == 0``). v1 stores ``zero - 1`` per field, so
it can hold true zeros ``1 .. 2**b``; v2 and planar hold ``0 .. 2**b - 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from ...errors import LayoutError, UnsupportedLayoutError
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from .bitstream import WORD_DTYPES, pack_stream, unpack_stream
from .planar import pack_planar, unpack_planar
from .rules import CONTINUOUS_BITS, PLANAR_BITS, allowed_pack_dtypes, needs_alignment, tensor_violations
from .transpose import transpose_2d

log = logging.getLogger(__name__)


class GptqLayout:
    """One GPTQ-family layout; instances are registered under ``key`` (see ``__init__``)."""

    marker_tensor = "qweight"

    def __init__(self, key: str, *, zero_offset: int, planar: bool) -> None:
        self.key = key
        self.zero_offset = zero_offset  # stored field = true zero - zero_offset (1 for v1)
        self.planar = planar

    def __repr__(self) -> str:
        return f"GptqLayout({self.key!r})"

    # -- helpers -------------------------------------------------------------------------------
    def _pack_line(self, values: np.ndarray, bits: int, pack_dtype: str) -> np.ndarray:
        return pack_planar(values, bits) if self.planar else pack_stream(values, bits, pack_dtype, trusted=True)

    def _pack_down_rows(self, codes: np.ndarray, bits: int, pack_dtype: str) -> np.ndarray:
        """``codes[out, in]`` -> ``qweight[words(in), out]`` (pack each output row, then transpose)."""
        return transpose_2d(self._pack_line(codes, bits, pack_dtype))

    def _unpack_down_rows(self, qweight: np.ndarray, bits: int, in_: int) -> np.ndarray:
        """``qweight[words(in), out]`` -> uint8 ``codes[out, in]``."""
        return self._unpack_line(transpose_2d(qweight), bits, in_)

    def _unpack_line(self, words: np.ndarray, bits: int, n: int) -> np.ndarray:
        return unpack_planar(words, bits, n) if self.planar else unpack_stream(words, bits, n)

    def zero_range(self, bits: int) -> tuple[int, int]:
        """Inclusive range of true zero points this layout can store for ``bits``."""
        return self.zero_offset, (1 << bits) - 1 + self.zero_offset

    # -- contract ------------------------------------------------------------------------------
    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        """Why :meth:`pack` cannot hold ``weight`` losslessly, or ``None`` when it can."""
        bits = weight.bits
        supported = PLANAR_BITS if self.planar else CONTINUOUS_BITS
        if bits not in supported:
            return f"{self.key} stores {supported}-bit codes, the weight is {bits}-bit"
        if needs_alignment(bits, self.planar):
            for name, dim in (("in_features", weight.in_features), ("out_features", weight.out_features)):
                if dim % 32:
                    return f"{self.key} {bits}-bit needs {name} a multiple of 32, found {dim}"
        lo, hi = self.zero_range(bits)
        if weight.zeros.size:
            zmin, zmax = int(weight.zeros.min()), int(weight.zeros.max())
            if zmin < lo or zmax > hi:
                extra = " (v1 stores zero - 1: a true zero of 0 underflows)" if self.zero_offset and zmin < lo else ""
                return f"{self.key} stores zero points in [{lo}, {hi}], the weight has [{zmin}, {zmax}]{extra}"
        return None

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        """Named tensors ``qweight``, ``qzeros``, ``scales``, ``g_idx`` (new arrays; input untouched)."""
        reason = self.cannot_represent(weight)
        if reason is not None:
            raise UnsupportedLayoutError(reason)
        if pack_dtype not in allowed_pack_dtypes(weight.bits, self.planar):
            allowed = ", ".join(allowed_pack_dtypes(weight.bits, self.planar))
            raise LayoutError(f"pack_dtype: {self.key} {weight.bits}-bit allows {allowed}, found {pack_dtype!r}")
        qweight = self._pack_down_rows(weight.codes, weight.bits, pack_dtype)
        fields = weight.zeros.astype(np.int64) - self.zero_offset
        qzeros = self._pack_line(fields.astype(np.uint8), weight.bits, pack_dtype)
        return {
            "qweight": qweight,
            "qzeros": qzeros,
            "scales": np.array(weight.scales, copy=True),
            "g_idx": np.asarray(weight.g_idx, dtype=np.int32).copy(),
        }

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        """Every rule ``tensors`` break for ``meta`` (see :mod:`.rules` for the rule ids)."""
        return tensor_violations(tensors, meta, self.planar)

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        """The logical weight; raises :class:`LayoutError` listing every violation first."""
        problems = self.validate(tensors, meta)
        if problems:
            raise LayoutError(f"{self.key} tensors are malformed: " + "; ".join(str(p) for p in problems))
        bits, in_, out = meta.bits, meta.in_features, meta.out_features
        codes = self._unpack_down_rows(np.asarray(tensors["qweight"]), bits, in_)
        fields = self._unpack_line(np.asarray(tensors["qzeros"]), bits, out)
        zeros = fields.astype(np.int32) + np.int32(self.zero_offset)
        info: dict[str, object] = {"source_format": self.key}
        if self.zero_offset:
            overflow = int(np.count_nonzero(fields == (1 << bits) - 1))
            if overflow:
                # Historical v1 writers stored zero - 1; a full field means a true zero of 2**bits.
                log.warning("%s: %d v1 zero fields hold 2**bits - 1 (true zero %d)", self.key, overflow, 1 << bits)
                info["v1_zero_overflow_fields"] = overflow
        g_idx = tensors.get("g_idx")
        g = default_g_idx(in_, meta.group_size) if g_idx is None else np.asarray(g_idx, dtype=np.int32).copy()
        scales = np.array(tensors["scales"], copy=True)
        return QuantizedWeight(codes, scales, zeros, g, bits, meta.group_size, meta.sym, info)

    def infer_meta(
        self,
        tensors: Mapping[str, np.ndarray],
        *,
        bits: int,
        group_size: int,
        sym: bool = True,
        pack_dtype: str = "int32",
    ) -> LayoutMeta:
        """Logical dims from the tensors: ``out`` from ``scales``, ``in`` from ``g_idx`` or ``qweight``."""
        if "scales" not in tensors or np.asarray(tensors["scales"]).ndim != 2:
            raise LayoutError(f"{self.key}: cannot infer out_features without a 2-D 'scales' tensor")
        out = int(np.asarray(tensors["scales"]).shape[1])
        if "g_idx" in tensors:
            in_ = int(np.asarray(tensors["g_idx"]).shape[0])
        elif "qweight" in tensors and pack_dtype in WORD_DTYPES:
            word_bits = WORD_DTYPES[pack_dtype].itemsize * 8
            in_ = int(np.asarray(tensors["qweight"]).shape[0]) * word_bits // bits
        else:
            raise LayoutError(f"{self.key}: cannot infer in_features without 'g_idx' or 'qweight'")
        return LayoutMeta(bits, group_size, in_, out, sym, pack_dtype)


GPTQ_V1 = GptqLayout("gptq", zero_offset=1, planar=False)
GPTQ_V2 = GptqLayout("gptq_v2", zero_offset=0, planar=False)
GPTQ_P = GptqLayout("gptq_p", zero_offset=0, planar=True)
