"""The solver: round-to-nearest with a per-group, per-row clipped range (weights ``[out, in]``, float32 math)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from qalgos.group_params import codes_of, dequant_of, gptq_params
from qalgos.result import QuantResult, build_logical, check_weight, stored_dequantized
from qalgos.rtn import natural_g_idx, quantize_groups
from qalgos.spec import QuantSpec


@dataclass(frozen=True)
class ClipSpec:
    """``quant``: the integer grid (bits, group size, sym, scale dtype); ``grid``: shrink steps tried per group;
    ``min_ratio``: the smallest fraction of the group's range tried (in ``(0, 1]``)."""

    quant: QuantSpec
    grid: int = 20
    min_ratio: float = 0.5


def clipped_params(
    x: torch.Tensor, spec: QuantSpec, *, grid: int, min_ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero ``[rows]`` of one group ``x [rows, n]``: GPTQ's parameters of ``x * r`` for the ratio ``r``
    in ``1, ..., min_ratio`` (``grid + 1`` values) whose codes of ``x`` give the smallest squared error, per row.
    Ratio 1 is plain RTN, so the error is never above RTN's."""
    best_scale, best_zero = gptq_params(x, spec)
    best_err = _error(x, best_scale, best_zero, spec)
    for step in range(1, grid + 1):
        ratio = 1.0 - (1.0 - min_ratio) * step / grid
        scale, zero = gptq_params(x * ratio, spec)
        err = _error(x, scale, zero, spec)
        better = err < best_err
        best_scale = torch.where(better, scale, best_scale)
        best_zero = torch.where(better, zero, best_zero)
        best_err = torch.where(better, err, best_err)
    return best_scale, best_zero


def _error(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    codes = codes_of(x, scale[:, None], zero[:, None], spec.maxq)
    return ((dequant_of(codes, scale[:, None], zero[:, None]) - x) ** 2).sum(dim=1)


def quantize_clipped(weight: torch.Tensor, spec: ClipSpec) -> QuantResult:
    """The clipped RTN of ``weight [out, in]`` (any float dtype): a qformats ``QuantizedWeight`` (natural group
    order), the dequantized weight in the input's dtype and the mean squared weight error as ``loss``."""
    check_weight(weight)
    w = weight.detach().to(torch.float32)
    params = partial(clipped_params, grid=spec.grid, min_ratio=spec.min_ratio)
    codes, scales, zeros, _ = quantize_groups(w, spec.quant, params)
    logical = build_logical(
        codes, scales, zeros, natural_g_idx(w.shape[1], spec.quant), spec.quant, {"algorithm": "rtn_clip"}
    )
    deq = stored_dequantized(logical, w)
    loss = float(((deq - w) ** 2).mean())
    return QuantResult(logical, deq.to(weight.dtype), loss, None, 0, None)
