"""Weight-only quantizers: FP8, bitsandbytes NF4/FP4 and int8, and GGUF blocks, through the qformats codecs.

These families have their own logical objects in qformats (they are not integer codes/scales/zeros):
``FP8Weight``, ``BnB4Weight``, ``BnB8Weight`` and ``GGUFWeight``. This module takes a torch weight
``[out, in]``, runs the codec's reference quantizer in float32, and reports the dequantized weight and
its error the same way the integer quantizers do. No calibration data is involved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TypeAlias

import numpy as np
import torch
from qformats.layouts.bnb import BnB4Weight, BnB8Weight
from qformats.layouts.families import WeightFamily, get_family, weight_only_keys
from qformats.layouts.fp8 import FP8Weight
from qformats.layouts.gguf import GGUFWeight

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
        check = self.weight_family.option_problem
        problem = check(asdict(self)) if check is not None else None
        if problem is not None:
            raise SpecError(problem)

    @property
    def weight_family(self) -> WeightFamily:
        """The qformats weight family of :attr:`family` (its reference quantizer and option checks)."""
        return get_family(self.family)

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
    """The family's reference quantizer (``WeightFamily.quantize``) on float32 ``w [out, in]``."""
    quantize = spec.weight_family.quantize
    if quantize is None:  # every weight-only family registers one; FAMILIES lists only those
        raise SpecError(f"family {spec.family!r}: qformats registers no quantizer for it")
    return quantize(w, {**asdict(spec), "source_dtype": source_dtype})  # type: ignore[return-value]


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
