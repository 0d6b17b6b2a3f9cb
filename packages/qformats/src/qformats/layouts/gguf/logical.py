"""The logical GGUF weight: raw ggml block bytes per output row plus the type that reads them.

GGUF blocks embed their own scales (and, for K types, quantized sub-block scales and minimums), so
they do not reduce to the ``codes/scales/zeros`` of :class:`~qformats.logical.QuantizedWeight` in
general. :class:`GGUFWeight` is their own logical object: ``qweight`` uint8 ``[out, row_bytes]`` where
``row_bytes = ceil(in / B) * T`` (``in`` zero-padded to the block size ``B``; ``T`` bytes per block).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from ...violations import Violation
from .codec import decode_rows, encode_rows
from .types import GGMLType, ggml_type


@dataclass(frozen=True, eq=False)
class GGUFWeight:
    """``qweight`` uint8 ``[out, row_bytes]`` of ggml type ``qtype`` for a ``[out, in_features]`` matrix."""

    qweight: np.ndarray
    qtype: str
    in_features: int

    def __post_init__(self) -> None:
        t = self.type
        if self.qweight.dtype != np.uint8 or self.qweight.ndim != 2:
            raise LayoutError(
                f"qweight: expected 2-D uint8 [out, row_bytes], found {self.qweight.dtype} {self.qweight.shape}"
            )
        expected = t.row_bytes(t.padded(self.in_features))
        if self.qweight.shape[1] != expected:
            raise LayoutError(
                f"qweight: expected {expected} bytes per row ({t.name}, in_features={self.in_features}), "
                f"found {self.qweight.shape[1]}"
            )

    @property
    def type(self) -> GGMLType:
        return ggml_type(self.qtype)

    @property
    def out_features(self) -> int:
        return int(self.qweight.shape[0])

    @classmethod
    def quantize(cls, weight: np.ndarray, qtype: str | int) -> GGUFWeight:
        """Quantize float ``[out, in]`` with the reference block quantizer of ``qtype``."""
        t = ggml_type(qtype)
        return cls(encode_rows(weight, t.name), t.name, int(weight.shape[1]))

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in_features]``."""
        return decode_rows(self.qweight, self.qtype, self.in_features)


def validate_gguf(
    tensors: Mapping[str, np.ndarray], qtype: str | int, in_features: int, out_features: int
) -> list[Violation]:
    """Every broken rule of one GGUF-family module (``qweight`` and optional ``bias``) of any subtype."""
    t = ggml_type(qtype)
    q = tensors.get("qweight")
    if q is None:
        return [Violation("GGUF-MISSING", "qweight", "a uint8 tensor", "absent")]
    found: list[Violation] = []
    if q.dtype != np.uint8:
        found.append(Violation("GGUF-DTYPE", "qweight", "uint8", str(q.dtype)))
    expected = (out_features, t.row_bytes(t.padded(in_features)))
    if tuple(q.shape) != expected:
        found.append(Violation("GGUF-SHAPE", "qweight", f"{expected} for {t.name}", str(tuple(q.shape))))
    bias = tensors.get("bias")
    if bias is not None and tuple(bias.shape) != (out_features,):
        found.append(Violation("GGUF-BIAS", "bias", f"({out_features},)", str(tuple(bias.shape))))
    return found


def unpack_gguf(tensors: Mapping[str, np.ndarray], qtype: str | int, in_features: int) -> GGUFWeight:
    """The :class:`GGUFWeight` of a module's ``qweight`` (``qtype`` comes from the config)."""
    q = tensors.get("qweight")
    if q is None:
        raise LayoutError("qweight: expected a uint8 tensor, found absent")
    problems = validate_gguf(tensors, qtype, in_features, int(q.shape[0]) if q.ndim else 0)
    if problems:
        raise LayoutError("; ".join(str(p) for p in problems))
    return GGUFWeight(np.asarray(q), ggml_type(qtype).name, in_features)
