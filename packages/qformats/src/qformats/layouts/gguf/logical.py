"""The logical GGUF weight: raw ggml block bytes per output row plus the type that reads them.

GGUF blocks embed their own scales (and, for K types, quantized sub-block scales and minimums), so
they do not reduce to the ``codes/scales/zeros`` of :class:`~qformats.logical.QuantizedWeight` in
general. :class:`GGUFWeight` is their own logical object: ``qweight`` uint8 ``[out, row_bytes]`` where
``row_bytes = ceil(in / B) * T`` (``in`` zero-padded to the block size ``B``; ``T`` bytes per block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
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
