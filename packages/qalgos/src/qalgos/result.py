"""What every integer quantizer returns: the logical weight plus the solve's report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from qformats.logical import QuantizedWeight

from .errors import ShapeError
from .finite_check import all_finite
from .spec import QuantSpec


@dataclass(frozen=True, eq=False)
class QuantResult:
    """The result of quantizing one weight ``[out, in]``.

    * ``weight``: the logical quantized weight (codes uint8 ``[out, in]``, scales ``[G, out]`` in
      ``spec.scale_dtype``, true zero points int32 ``[G, out]``, g_idx int32 ``[in]``).
    * ``dequantized``: ``[out, in]`` in the input weight's dtype, equal to ``weight.dequantize()`` cast (it
      is computed from the stored scales, see :func:`stored_dequantized`).
    * ``loss``: GPTQ: ``sum((w - q)**2 / d**2) / 2 / nsamples``; RTN and AWQ: mean squared weight error.
    * ``damp``: the damping fraction actually used by GPTQ (``None`` for RTN/AWQ or when GPTQ fell back).
    * ``nsamples``: calibration tokens behind the result (0 for data-free quantizers).
    * ``fallback``: why RTN replaced the requested algorithm, or ``None``.
    """

    weight: QuantizedWeight
    dequantized: torch.Tensor
    loss: float
    damp: float | None
    nsamples: int
    fallback: str | None = None


def check_weight(weight: torch.Tensor, name: str = "weight") -> None:
    """Raise :class:`ShapeError` unless ``weight`` is a 2-D floating tensor ``[out, in]``."""
    if not isinstance(weight, torch.Tensor):
        raise ShapeError(f"{name}: expected a torch.Tensor [out, in], found {type(weight).__name__}")
    if weight.ndim != 2 or weight.shape[0] == 0 or weight.shape[1] == 0:
        raise ShapeError(f"{name}: expected a non-empty 2-D tensor [out, in], found shape {tuple(weight.shape)}")
    if not weight.dtype.is_floating_point:
        raise ShapeError(f"{name}: expected a floating dtype, found {weight.dtype}")
    if not all_finite(weight):
        raise ShapeError(f"{name}: contains NaN or infinity")


def build_logical(
    codes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    g_idx: torch.Tensor,
    spec: QuantSpec,
    meta: dict[str, object],
) -> QuantizedWeight:
    """Numpy :class:`QuantizedWeight` from torch ``codes [out, in]``, ``scales``/``zeros [G, out]``, ``g_idx [in]``."""
    np_scales = scales.detach().to(torch.float32).cpu().numpy()
    if spec.scale_dtype == "float16":
        np_scales = np_scales.astype(np.float16)
    return QuantizedWeight(
        codes=codes.detach().cpu().to(torch.uint8).numpy(),
        scales=np.ascontiguousarray(np_scales),
        zeros=zeros.detach().cpu().round().to(torch.int32).numpy(),
        g_idx=g_idx.detach().cpu().to(torch.int32).numpy(),
        bits=spec.bits,
        group_size=spec.group_size,
        sym=spec.sym,
        meta=meta,
    )


DEQUANTIZE_BLOCK_ELEMENTS = 1 << 22


def stored_dequantized(logical: QuantizedWeight, like: torch.Tensor) -> torch.Tensor:
    """``logical.dequantize()`` (float32 arithmetic on the stored scales) as a tensor ``[out, in]`` with
    ``like``'s dtype and device: what a checkpoint of ``logical`` computes, and what the next layer sees.

    Computed with torch, block by block of about :data:`DEQUANTIZE_BLOCK_ELEMENTS` output values: the same
    two float32 operations per value as qformats' numpy formula, ``(code - zero) * scale``, so the result is
    bit for bit ``logical.dequantize()`` (tested), on every thread torch has instead of numpy's one (a
    ``[14336, 4096]`` weight: 2.2 -> 0.6 s here). Each block is computed in one float32 scratch and written
    into the result in ``like``'s dtype (the same rounding as converting a whole float32 result, without it).
    When every group is a run of consecutive columns (``g_idx`` = column // group width: natural and
    group-aware orders) the scales and zeros broadcast over ``[rows, groups, width]``; otherwise (activation
    order) they are gathered per column, ``[rows, in]`` float32 each, as in qformats."""
    codes = torch.from_numpy(logical.codes)
    out_f, in_f = codes.shape
    g_idx = torch.from_numpy(logical.g_idx).to(torch.int64)
    scales_t = torch.from_numpy(np.ascontiguousarray(logical.scales.T, dtype=np.float32))  # [out, G], small
    zeros_t = torch.from_numpy(np.ascontiguousarray(logical.zeros.T, dtype=np.float32))
    width = _run_width(g_idx, scales_t.shape[1])
    result = torch.empty(out_f, in_f, dtype=like.dtype)
    rows = max(1, DEQUANTIZE_BLOCK_ELEMENTS // max(1, in_f))
    scratch = torch.empty(min(rows, out_f) * in_f, dtype=torch.float32)
    for r0 in range(0, out_f, rows):
        r1 = min(out_f, r0 + rows)
        block = scratch[: (r1 - r0) * in_f].view(r1 - r0, in_f)
        block.copy_(codes[r0:r1])
        if width:
            runs = block.view(r1 - r0, in_f // width, width)
            runs.sub_(zeros_t[r0:r1, :, None]).mul_(scales_t[r0:r1, :, None])
        else:
            block.sub_(zeros_t[r0:r1].index_select(1, g_idx))
            block.mul_(scales_t[r0:r1].index_select(1, g_idx))
        result[r0:r1].copy_(block)
    return result.to(device=like.device)


def _run_width(g_idx: torch.Tensor, groups: int) -> int:
    """The group width ``w`` when ``g_idx [in]`` is ``column // w`` for all ``groups`` groups (each group a run
    of ``w`` consecutive columns, ``in = groups * w``), else 0."""
    in_f = int(g_idx.numel())
    if groups <= 0 or in_f % groups:
        return 0
    width = in_f // groups
    natural = torch.arange(in_f, dtype=torch.int64) // width
    return width if torch.equal(g_idx, natural) else 0
