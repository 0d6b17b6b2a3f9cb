"""Layer cases for conformance tests: a logical weight per case, activations, and the float reference.

Shapes: a case's weight is ``[out, in]``; activations are ``[batch, in]``; outputs ``[batch, out]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from qformats.logical import QuantizedWeight, default_g_idx, group_count

# Unit roundoff used for tolerances: bfloat16 and float16 per their mantissas; float32 loosened to cover
# float32 accumulation over a few thousand terms in any order.
TOLERANCE_EPS: dict[torch.dtype, float] = {
    torch.float32: 2.0**-16,
    torch.bfloat16: 2.0**-7,
    torch.float16: 2.0**-10,
}


@dataclass(frozen=True)
class LayerCase:
    """One quantized layer to test: layout ``fmt`` and the logical weight's parameters."""

    fmt: str
    bits: int
    group_size: int
    sym: bool
    out_features: int
    in_features: int
    act_order: bool = False
    bias: bool = False
    method: str | None = None
    pack_dtype: str = "int32"

    def __str__(self) -> str:
        gs = "gch" if self.group_size == -1 else f"g{self.group_size}"
        tags = ["sym" if self.sym else "asym", "act" if self.act_order else "", "bias" if self.bias else ""]
        return "-".join(
            [self.fmt, f"{self.bits}b", gs, f"{self.out_features}x{self.in_features}", *[t for t in tags if t]]
        )


def make_weight(case: LayerCase, seed: int = 0) -> QuantizedWeight:
    """A random logical weight for ``case``: fp16 scales in [0.005, 0.02), zeros in [1, 2**bits - 1]
    (``2**(bits-1)`` when symmetric), and for act-order a GPTQ desc_act style permuted ``g_idx``."""
    rng = np.random.default_rng(seed)
    out, in_ = case.out_features, case.in_features
    groups = group_count(in_, case.group_size)
    top = (1 << case.bits) - 1
    codes = rng.integers(0, top + 1, size=(out, in_)).astype(np.uint8)
    scales = (0.005 + 0.015 * rng.random((groups, out))).astype(np.float16)
    if case.sym:
        zeros = np.full((groups, out), 1 << (case.bits - 1), dtype=np.int32)
    else:
        zeros = rng.integers(1, top, size=(groups, out), endpoint=True).astype(np.int32)
    g_idx = default_g_idx(in_, case.group_size)
    if case.act_order:
        order = rng.permutation(in_)
        g_idx = np.empty(in_, dtype=np.int32)
        g_idx[order] = np.arange(in_, dtype=np.int32) // np.int32(case.group_size)
    return QuantizedWeight(codes, scales, zeros, g_idx, case.bits, case.group_size, case.sym)


def make_bias(case: LayerCase, seed: int = 0) -> np.ndarray | None:
    """A float16 ``[out]`` bias when the case asks for one."""
    if not case.bias:
        return None
    return np.random.default_rng(seed + 1).standard_normal(case.out_features).astype(np.float16)


def make_activations(case: LayerCase, batch: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``[batch, in]`` standard normal activations in ``dtype``."""
    gen = torch.Generator().manual_seed(seed + 7)
    return torch.randn(batch, case.in_features, generator=gen).to(dtype)


def float_reference(x: torch.Tensor, weight: QuantizedWeight, bias: np.ndarray | None) -> torch.Tensor:
    """``x @ W.T + b`` in float64 from the exact float32 dequantization: ``[batch, out]``."""
    w = torch.from_numpy(weight.dequantize()).double()
    y = x.double() @ w.T
    if bias is not None:
        y = y + torch.from_numpy(bias.astype(np.float64))
    return y


def tolerance(x: torch.Tensor, weight: QuantizedWeight, bias: np.ndarray | None, dtype: torch.dtype) -> torch.Tensor:
    """Per-element bound ``4 * eps(dtype) * (|x| @ M.T + |y| + |b|)`` with ``M = scales[g_idx] * 2**bits``.

    ``M`` bounds every representable weight magnitude in its group, so the bound covers the rounding of
    weights, offsets and partial sums to the activation dtype but not a wrong code, zero or scale.
    """
    s = torch.from_numpy(weight.scales.astype(np.float64))[torch.from_numpy(weight.g_idx.astype(np.int64))].T
    bound = x.double().abs() @ (s * float(1 << weight.bits)).T
    y = float_reference(x, weight, bias).abs()
    if bias is not None:
        bound = bound + torch.from_numpy(np.abs(bias.astype(np.float64)))
    return 4.0 * TOLERANCE_EPS[dtype] * (bound + y)
