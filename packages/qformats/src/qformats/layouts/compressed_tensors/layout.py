"""compressed-tensors ``pack-quantized`` (llm-compressor's W4A16 / W8A16 int format) as a qformats layout.

Tensors of one module (checkpoint keys without the module prefix):

* ``weight_packed``     ``[out, ceil(in*b/32)]`` int32 -- codes packed along the input axis (dense stream,
  see :mod:`.bitstream`); each stored field is the signed code plus ``2**(b-1)``, i.e. the unsigned code.
* ``weight_scale``      ``[out, G]`` float (bf16/fp16/fp32 as written; ``G = 1`` for the channel strategy,
  a single value for the tensor strategy).
* ``weight_zero_point`` ``[ceil(out*b/32), G]`` int32 -- only for asymmetric schemes; zero points packed
  along the *output* axis, each field the signed zero plus ``2**(b-1)`` (the true unsigned zero).
* ``weight_shape``      ``[2]`` int -- ``[out, in]``.
* ``weight_g_idx``      ``[in]`` int -- act-order group map written by compressed-tensors releases that had
  ``actorder: group`` (removed upstream in 2026); honoured when present.

Symmetric schemes store no zero point: the true zero is ``2**(b-1)``. The reference dequantization is
``(q - zp) * scale`` in the scale's dtype; the logical ``scales * (codes - zeros)`` in float32 is exact, so
casting it to the scale dtype reproduces compressed-tensors' output bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import LayoutError, UnsupportedLayoutError
from ...logical import QuantizedWeight, default_g_idx, group_count
from ...violations import Violation
from ..registry import LayoutMeta
from .bitstream import pack_dense, unpack_dense
from .rules import scale_matrix, tensor_violations

KEY = "pack-quantized"


class PackQuantizedLayout:
    """The ``pack-quantized`` layout (registered under :data:`KEY`)."""

    key = KEY
    marker_tensor = "weight_packed"

    def __repr__(self) -> str:
        return f"PackQuantizedLayout({self.key!r})"

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        """Why :meth:`pack` cannot hold ``weight`` exactly, or ``None``."""
        if weight.group_size > 0 and weight.in_features % weight.group_size:
            return (
                f"{self.key} needs in_features divisible by group_size (compressed-tensors rejects partial "
                f"groups), found {weight.in_features} % {weight.group_size}"
            )
        mid = 1 << (weight.bits - 1)
        if weight.sym and weight.zeros.size and not bool(np.all(weight.zeros == mid)):
            return f"{self.key} symmetric schemes store no zero point (implied {mid}); the weight has other zeros"
        return None

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        """Named tensors (new arrays; ``weight`` untouched). Only int32 words exist in this format."""
        reason = self.cannot_represent(weight)
        if reason is not None:
            raise UnsupportedLayoutError(reason)
        if pack_dtype != "int32":
            raise LayoutError(f"pack_dtype: {self.key} packs int32 words only, found {pack_dtype!r}")
        out: dict[str, np.ndarray] = {
            "weight_packed": pack_dense(weight.codes, weight.bits),
            "weight_scale": np.ascontiguousarray(np.asarray(weight.scales).T),
            "weight_shape": np.array([weight.out_features, weight.in_features], dtype=np.int64),
        }
        if not weight.sym:
            out["weight_zero_point"] = np.ascontiguousarray(pack_dense(weight.zeros.astype(np.uint8), weight.bits).T)
        if not weight.has_default_g_idx():
            out["weight_g_idx"] = np.asarray(weight.g_idx, dtype=np.int32).copy()
        return out

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        """Every rule ``tensors`` break for ``meta`` (rule ids in :mod:`.rules`)."""
        return tensor_violations(tensors, meta)

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        """The logical weight; ``sym`` is decided by the stored bits (a ``weight_zero_point`` tensor or not)."""
        problems = self.validate(tensors, meta)
        if problems:
            raise LayoutError(f"{self.key} tensors are malformed: " + "; ".join(str(p) for p in problems))
        bits, in_, out = meta.bits, meta.in_features, meta.out_features
        codes = unpack_dense(np.asarray(tensors["weight_packed"]), bits, in_)
        matrix = scale_matrix(np.asarray(tensors["weight_scale"]), out)
        if matrix is None:  # validate() reported it already; kept for the type checker
            raise LayoutError(f"{self.key}: weight_scale: expected [out, G], found {np.shape(tensors['weight_scale'])}")
        scales = np.ascontiguousarray(matrix.T).copy()
        groups = group_count(in_, meta.group_size)
        info: dict[str, object] = {"source_format": self.key}
        if "weight_zero_point" in tensors:
            zp_words = np.ascontiguousarray(np.asarray(tensors["weight_zero_point"]).T)
            zeros = unpack_dense(zp_words, bits, out).astype(np.int32)
            sym = False
        else:
            zeros = np.full((groups, out), 1 << (bits - 1), dtype=np.int32)
            sym = True
        if sym != meta.sym:
            info["sym_from_tensors"] = sym  # the config said otherwise; the stored tensors decide
        g_idx = tensors.get("weight_g_idx")
        g = default_g_idx(in_, meta.group_size) if g_idx is None else np.asarray(g_idx, dtype=np.int32).copy()
        return QuantizedWeight(codes, scales, zeros, g, bits, meta.group_size, sym, info)

    def infer_meta(
        self,
        tensors: Mapping[str, np.ndarray],
        *,
        bits: int,
        group_size: int,
        sym: bool = True,
        pack_dtype: str = "int32",
    ) -> LayoutMeta:
        """Logical dims: ``weight_shape`` when it holds values, else ``weight_g_idx``/group count/word count."""
        if "weight_packed" not in tensors or np.asarray(tensors["weight_packed"]).ndim != 2:
            raise LayoutError(f"{self.key}: cannot infer dimensions without a 2-D 'weight_packed' tensor")
        packed = np.asarray(tensors["weight_packed"])
        out = int(packed.shape[0])
        shape = np.asarray(tensors.get("weight_shape", np.zeros(0, dtype=np.int64)))
        if shape.shape == (2,) and int(shape[0]) == out and int(shape[1]) > 0:
            in_ = int(shape[1])
        elif "weight_g_idx" in tensors:
            in_ = int(np.asarray(tensors["weight_g_idx"]).shape[0])
        elif group_size > 0 and "weight_scale" in tensors and np.asarray(tensors["weight_scale"]).ndim == 2:
            in_ = int(np.asarray(tensors["weight_scale"]).shape[1]) * group_size
        elif (packed.shape[1] * 32) % bits == 0:
            in_ = packed.shape[1] * 32 // bits
        else:
            raise LayoutError(f"{self.key}: in_features is ambiguous without 'weight_shape' for {bits}-bit words")
        return LayoutMeta(bits, group_size, in_, out, sym, pack_dtype)


PACK_QUANTIZED = PackQuantizedLayout()
