"""Weight-only quantizers: FP8, bitsandbytes NF4/FP4 and int8, and GGUF blocks, through the qformats codecs.

These families have their own logical objects in qformats (they are not integer codes/scales/zeros):
``FP8Weight``, ``BnB4Weight``, ``BnB8Weight`` and ``GGUFWeight``. This module takes a torch weight
``[out, in]``, runs the codec's reference quantizer in float32, and reports the dequantized weight and
its error the same way the integer quantizers do. No calibration data is involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch
from qformats.layouts.bnb import BnB4Weight, BnB8Weight
from qformats.layouts.families import weight_only_keys
from qformats.layouts.fp8 import FP8Weight
from qformats.layouts.gguf import GGUFWeight, encodable_types

from .errors import SpecError
from .result import check_weight

#: The weight-only family keys of qformats' weight-family registry: ``("fp8", "bnb4", "int8", "gguf")``.
FAMILIES: tuple[str, ...] = weight_only_keys()
GGUF_DEFAULT_BY_BITS = {1: "Q1_0", 2: "Q2_0", 4: "Q4_0", 5: "Q5_K", 6: "Q6_K", 8: "Q8_0"}

Logical: TypeAlias = FP8Weight | BnB4Weight | BnB8Weight | GGUFWeight


@dataclass(frozen=True)
class WeightOnlySpec:
    """Which weight-only family and its options.

    * ``"fp8"``: ``fp8_format`` (``float8_e4m3fn`` default), ``scale_method`` ``row``/``tensor``/``block``,
      ``block_size`` ``(rows, cols)`` for block scaling.
    * ``"bnb4"``: ``quant_type`` ``fp4`` (the reference default) or ``nf4``, ``block_size`` (64 default),
      ``compress_statistics`` (True default).
    * ``"int8"``: bitsandbytes row-scaled int8 (no options).
    * ``"gguf"``: ``gguf_type``, a ggml type name (``Q4_0``, ``Q8_0``, ``Q4_K``, ...).
    """

    family: str
    fp8_format: str = "float8_e4m3fn"
    scale_method: str = "row"
    block_size: tuple[int, int] | int | None = None
    quant_type: str = "fp4"
    compress_statistics: bool = True
    gguf_type: str | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise SpecError(f"family: expected one of {FAMILIES}, found {self.family!r}")
        if self.family == "gguf":
            if self.gguf_type is None:
                raise SpecError("gguf_type: required for the gguf family (e.g. 'Q4_0', 'Q4_K', 'Q8_0')")
            if self.gguf_type.upper() not in encodable_types():
                raise SpecError(f"gguf_type: expected one of {encodable_types()}, found {self.gguf_type!r}")
        if self.family == "bnb4" and self.quant_type not in ("fp4", "nf4"):
            raise SpecError(f"quant_type: expected 'fp4' or 'nf4', found {self.quant_type!r}")

    @classmethod
    def gguf_for_bits(cls, bits: int) -> WeightOnlySpec:
        """The reference's default GGUF type for a bit width (1, 2, 4, 5, 6, 8; 3 has none)."""
        if bits not in GGUF_DEFAULT_BY_BITS:
            raise SpecError(f"bits: GGUF has a default type for {sorted(GGUF_DEFAULT_BY_BITS)}, found {bits}")
        return cls("gguf", gguf_type=GGUF_DEFAULT_BY_BITS[bits])


@dataclass(frozen=True, eq=False)
class WeightOnlyResult:
    """``weight``: the family's qformats logical object; ``dequantized``: ``[out, in]`` in the input dtype;
    ``loss``: mean squared weight error (float32 reference values vs dequantized)."""

    weight: Logical
    dequantized: torch.Tensor
    loss: float


def _quantize_numpy(w: np.ndarray, spec: WeightOnlySpec, source_dtype: str) -> Logical:
    if spec.family == "fp8":
        block = spec.block_size if isinstance(spec.block_size, tuple) else None
        method = "block" if block is not None and spec.scale_method == "row" else spec.scale_method
        return FP8Weight.quantize(w, format=spec.fp8_format, method=method, block_size=block)
    if spec.family == "bnb4":
        size = spec.block_size if isinstance(spec.block_size, int) else 64
        return BnB4Weight.quantize(
            w,
            quant_type=spec.quant_type,
            blocksize=size,
            compress_statistics=spec.compress_statistics,
            dtype=source_dtype,
        )
    if spec.family == "int8":
        return BnB8Weight.quantize(w)
    return GGUFWeight.quantize(w, str(spec.gguf_type).upper())


def quantize_weight_only(weight: torch.Tensor, spec: WeightOnlySpec) -> WeightOnlyResult:
    """Quantize ``weight [out, in]`` (any float dtype) with ``spec``'s family through the qformats codec.

    The bitsandbytes 4-bit state records the input dtype name (``float16``, ``bfloat16``, ``float32``)."""
    check_weight(weight)
    source_dtype = str(weight.dtype).removeprefix("torch.")
    w = weight.detach().to(torch.float32).cpu().numpy()
    logical = _quantize_numpy(w, spec, source_dtype)
    dequant = np.asarray(logical.dequantize(), dtype=np.float32).reshape(w.shape)
    loss = float(np.mean((dequant.astype(np.float64) - w.astype(np.float64)) ** 2))
    return WeightOnlyResult(logical, torch.from_numpy(dequant).to(weight.dtype), loss)
