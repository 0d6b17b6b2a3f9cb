"""bitsandbytes 8-bit row-scaled weights (LLM.int8() without outliers).

Tensors: ``weight`` int8 ``[out, in]`` and the row statistics float32 ``[out]`` named ``weight_scb``
(reference toolkit) or ``SCB`` (Hugging Face / bitsandbytes, with a ``weight_format`` uint8 scalar 0 =
row-major). Quantization is bitsandbytes' ``int8_vectorwise_quant`` with threshold 0 on the fp16
weight: ``scb = max |w|`` per row, ``q = round_half_even(w * (127 / scb))``; dequantization is
``q * scb * (1/127)`` in float32 (``1/127`` as bitsandbytes writes it). An all-zero row (``scb = 0``)
encodes as zeros (bitsandbytes would divide by zero there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from ...violations import Violation

_INV127 = np.float32(7.874015718698502e-3)
_SCB_NAMES = {"reference": "weight_scb", "hf": "SCB"}


@dataclass(frozen=True, eq=False)
class BnB8Weight:
    """``weight`` int8 ``[out, in]`` with per-row ``scb`` float32 ``[out]``."""

    weight: np.ndarray
    scb: np.ndarray

    def __post_init__(self) -> None:
        if self.weight.dtype != np.int8 or self.weight.ndim != 2:
            raise LayoutError(f"weight: expected 2-D int8, found {self.weight.dtype} {self.weight.shape}")
        if self.scb.shape != (self.weight.shape[0],) or self.scb.dtype != np.float32:
            raise LayoutError(
                f"weight_scb: expected float32 ({self.weight.shape[0]},), found {self.scb.dtype} {self.scb.shape}"
            )

    @classmethod
    def quantize(cls, weight: np.ndarray) -> BnB8Weight:
        w16 = np.asarray(weight).astype(np.float16)
        if w16.ndim != 2 or not np.isfinite(w16).all():
            raise LayoutError(f"weight: expected a finite 2-D matrix (as fp16), found shape {w16.shape}")
        scb = np.abs(w16).max(axis=1).astype(np.float32)
        with np.errstate(divide="ignore"):
            factor = np.where(scb > 0, np.float32(127) / scb, np.float32(0)).astype(np.float32)
        q = np.rint(w16.astype(np.float32) * factor[:, None]).astype(np.int8)
        return cls(q, scb)

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]``."""
        result: np.ndarray = (self.weight.astype(np.float32) * self.scb[:, None]) * _INV127
        return result


def pack_bnb8(weight: BnB8Weight, *, naming: str = "reference") -> dict[str, np.ndarray]:
    if naming not in _SCB_NAMES:
        raise LayoutError(f"naming: expected one of {tuple(_SCB_NAMES)}, found {naming!r}")
    tensors = {"weight": weight.weight.copy(), _SCB_NAMES[naming]: weight.scb.copy()}
    if naming == "hf":
        tensors["weight_format"] = np.zeros((), dtype=np.uint8)
    return tensors


def validate_bnb8(tensors: Mapping[str, np.ndarray]) -> list[Violation]:
    names = [n for n in _SCB_NAMES.values() if n in tensors]
    if "weight" not in tensors or len(names) != 1:
        return [Violation("BNB8-MISSING", "weight_scb", "weight plus exactly one of weight_scb / SCB", str(names))]
    fmt = tensors.get("weight_format")
    if fmt is not None and int(np.asarray(fmt).reshape(-1)[0]) != 0:
        return [Violation("BNB8-FORMAT", "weight_format", "0 (row-major)", str(np.asarray(fmt).tolist()))]
    try:
        BnB8Weight(np.asarray(tensors["weight"]), np.asarray(tensors[names[0]]))
    except LayoutError as exc:
        return [Violation("BNB8-SHAPE", names[0], "int8 [out, in] with float32 [out]", str(exc))]
    return []


def unpack_bnb8(tensors: Mapping[str, np.ndarray]) -> BnB8Weight:
    problems = validate_bnb8(tensors)
    if problems:
        raise LayoutError("; ".join(str(p) for p in problems))
    name = "weight_scb" if "weight_scb" in tensors else "SCB"
    return BnB8Weight(np.asarray(tensors["weight"]), np.asarray(tensors[name]))
