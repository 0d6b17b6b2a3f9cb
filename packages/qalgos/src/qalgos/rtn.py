"""Round-to-nearest: quantize a weight group by group with no calibration data."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .group_params import codes_of, dequant_of, gptq_params
from .result import QuantResult, build_logical, check_weight, stored_dequantized
from .spec import QuantSpec

ParamFn = Callable[[torch.Tensor, QuantSpec], tuple[torch.Tensor, torch.Tensor]]


def quantize_groups(
    weight: torch.Tensor, spec: QuantSpec, params: ParamFn
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-wise quantization of a float32 ``weight [out, in]`` with the natural group map.

    Returns float ``codes [out, in]``, ``scales [G, out]``, ``zeros [G, out]`` and the dequantized
    float32 ``[out, in]``. The last group may be partial.
    """
    out, in_ = weight.shape
    width = spec.group_width(in_)
    groups = spec.groups(in_)
    device = weight.device
    scales = torch.empty(groups, out, dtype=torch.float32, device=device)
    zeros = torch.empty(groups, out, dtype=torch.float32, device=device)
    codes = torch.empty(out, in_, dtype=torch.float32, device=device)
    deq = torch.empty(out, in_, dtype=torch.float32, device=device)
    for g in range(groups):
        cols = slice(g * width, min((g + 1) * width, in_))
        block = weight[:, cols]
        scale, zero = params(block, spec)
        scales[g], zeros[g] = scale, zero
        c = codes_of(block, scale[:, None], zero[:, None], spec.maxq)
        codes[:, cols] = c
        deq[:, cols] = dequant_of(c, scale[:, None], zero[:, None])
    return codes, scales, zeros, deq


def natural_g_idx(in_features: int, spec: QuantSpec) -> torch.Tensor:
    """int32 ``[in]``: ``i // group_size`` (all zeros per-channel)."""
    return torch.arange(in_features, dtype=torch.int32) // spec.group_width(in_features)


def quantize_rtn(weight: torch.Tensor, spec: QuantSpec, fallback: str | None = None) -> QuantResult:
    """Round-to-nearest with the GPTQ parameter formulas (and ``spec.mse`` search when set).

    ``weight`` is ``[out, in]`` in any float dtype; the math runs in float32. ``fallback`` records why RTN
    stands in for another algorithm (it is copied into the result and the weight's meta). The reported
    ``loss`` is the mean squared weight error.
    """
    check_weight(weight)
    w = weight.detach().to(torch.float32)
    codes, scales, zeros, _ = quantize_groups(w, spec, gptq_params)
    meta: dict[str, object] = {"algorithm": "rtn"}
    if fallback is not None:
        meta["fallback"] = fallback
    logical = build_logical(codes, scales, zeros, natural_g_idx(w.shape[1], spec), spec, meta)
    deq = stored_dequantized(logical, w)
    loss = float(((deq - w) ** 2).mean())
    return QuantResult(logical, deq.to(weight.dtype), loss, None, 0, fallback)
