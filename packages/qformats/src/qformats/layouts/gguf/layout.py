"""The ``gguf`` layout: the reference's GGUF-family safetensors module tensors.

A module stores ``qweight`` uint8 ``[out, ceil(in / B) * T]`` (ggml block bytes per output row, ``in``
zero-padded to the block size) and optionally a dense ``bias``. The subtype (Q4_0, Q4_K, ...) is not
recoverable from the bytes (Q4_0 and Q4_K both use 4.5 bits per weight), so it comes from the config.

Registry protocol: the ``QuantizedWeight`` form ``scales * (codes - zeros)`` is exact only for the
symmetric 32-element "type-0" blocks with fp16 scales: Q4_0 (bits 4, zero 8), Q5_0 (bits 5, zero 16)
and Q8_0 (bits 8, zero 128, codes are int8 + 128). The registered :class:`GGUFLayout` therefore maps
``bits`` 4/5/8 with ``group_size`` 32 to those subtypes; every other subtype goes through
:class:`~qformats.layouts.gguf.logical.GGUFWeight` with an explicit ``qtype``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import LayoutError, UnsupportedLayoutError
from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ..registry import LayoutMeta
from .codecs_legacy import _pack_nibbles, _unpack_nibbles
from .types import ggml_type

TYPE0_BY_BITS: dict[int, str] = {4: "Q4_0", 5: "Q5_0", 8: "Q8_0"}


def _type_for(bits: int, group_size: int) -> str:
    name = TYPE0_BY_BITS.get(bits)
    if name is None or group_size != 32:
        raise UnsupportedLayoutError(
            f"gguf: the QuantizedWeight form covers bits 4/5/8 with group_size 32 (Q4_0/Q5_0/Q8_0), "
            f"found bits={bits}, group_size={group_size}; use GGUFWeight with an explicit qtype"
        )
    return name


class GGUFLayout:
    """Registry adapter for the type-0 GGUF subtypes (see the module docstring)."""

    key = "gguf"

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        name = TYPE0_BY_BITS.get(weight.bits)
        if name is None:
            return f"bits={weight.bits}: only 4, 5 and 8 map to a GGUF type-0 block (Q4_0, Q5_0, Q8_0)"
        if weight.group_size != 32:
            return f"group_size={weight.group_size}: GGUF type-0 blocks hold exactly 32 inputs"
        if weight.scales.dtype != np.float16:
            return f"scales dtype {weight.scales.dtype}: GGUF blocks store fp16 scales"
        if not weight.has_default_g_idx():
            return "g_idx is permuted (act-order); GGUF blocks are contiguous runs of 32 inputs"
        zero = 1 << (weight.bits - 1)
        if not np.all(weight.zeros == zero):
            return f"zeros: {name} has a fixed zero point of {zero} in every group"
        return None

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        """``qweight`` uint8 ``[out, ceil(in/32) * T]``; ``pack_dtype`` is ignored (bytes are bytes)."""
        reason = self.cannot_represent(weight)
        if reason is not None:
            raise UnsupportedLayoutError(f"gguf: cannot represent this weight: {reason}")
        name = _type_for(weight.bits, weight.group_size)
        t = ggml_type(name)
        out, in_ = weight.codes.shape
        padded = t.padded(in_)
        zero = 1 << (weight.bits - 1)
        codes = np.full((out, padded), zero, dtype=np.uint8)
        codes[:, :in_] = weight.codes
        blocks = codes.reshape(-1, 32)
        d = np.ascontiguousarray(weight.scales.T).reshape(-1, 1).view(np.uint8).reshape(-1, 2)
        if name == "Q4_0":
            body = _pack_nibbles(blocks)
        elif name == "Q5_0":
            mask = np.packbits(blocks >> np.uint8(4), axis=1, bitorder="little")
            body = np.concatenate([mask, _pack_nibbles(blocks)], axis=1)
        else:
            body = (blocks.astype(np.int16) - 128).astype(np.int8).view(np.uint8)
        return {"qweight": np.concatenate([d, body], axis=1).reshape(out, t.row_bytes(padded))}

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        found: list[Violation] = []
        try:
            t = ggml_type(_type_for(meta.bits, meta.group_size))
        except UnsupportedLayoutError as exc:
            return [Violation("GGUF-META", "meta", "bits 4/5/8 with group_size 32", str(exc))]
        q = tensors.get("qweight")
        if q is None:
            return [Violation("GGUF-MISSING", "qweight", "a uint8 tensor", "absent")]
        expected = (meta.out_features, t.row_bytes(t.padded(meta.in_features)))
        if q.dtype != np.uint8:
            found.append(Violation("GGUF-DTYPE", "qweight", "uint8", str(q.dtype)))
        if tuple(q.shape) != expected:
            found.append(Violation("GGUF-SHAPE", "qweight", f"{expected} for {t.name}", str(tuple(q.shape))))
        return found

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        problems = self.validate(tensors, meta)
        if problems:
            raise LayoutError("; ".join(str(p) for p in problems))
        name = _type_for(meta.bits, meta.group_size)
        t = ggml_type(name)
        out, in_ = meta.out_features, meta.in_features
        padded = t.padded(in_)
        blocks = np.ascontiguousarray(tensors["qweight"]).reshape(-1, t.type_size)
        scales = blocks[:, :2].copy().view(np.float16).reshape(out, padded // 32).T.copy()
        if name == "Q4_0":
            codes = _unpack_nibbles(blocks[:, 2:])
        elif name == "Q5_0":
            high = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little")
            codes = _unpack_nibbles(blocks[:, 6:]) | (high << np.uint8(4))
        else:
            codes = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        codes = codes.reshape(out, padded)[:, :in_].copy()
        groups = scales.shape[0]
        zeros = np.full((groups, out), 1 << (meta.bits - 1), dtype=np.int32)
        return QuantizedWeight(codes, scales, zeros, default_g_idx(in_, 32), meta.bits, 32, True)
