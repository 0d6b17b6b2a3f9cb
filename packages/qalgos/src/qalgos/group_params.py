"""Per-group scale/zero formulas and the code rounding shared by every integer quantizer.

All functions take a group of weights ``x: [rows, n]`` (rows = output channels, n = the group's input
columns) in float32 and return per-row ``scale: [rows]`` float32 and ``zero: [rows]`` float32 holding
integers in ``[0, 2**bits - 1]``. Codes are ``clamp(round(x / scale) + zero, 0, maxq)`` (round half to
even) and dequantize to ``scale * (code - zero)``.

Two parameter families exist because the reference uses two:

* GPTQ (also RTN): the range always includes 0; symmetric ``scale = 2 * absmax / maxq`` with
  ``zero = 2**(bits-1)`` (as in the reference, a row with no negative value keeps the range ``[0, max]``,
  i.e. ``scale = max / maxq``); asymmetric ``scale = (max - min) / maxq``, ``zero = round(-min / scale)``;
  an all-zero row gets the range [-1, 1].
* AWQ: symmetric ``scale = max(absmax, 1e-5) / (2**(bits-1) - 1)`` with ``zero = 2**(bits-1)``; asymmetric
  ``scale = max(max - min, 1e-5) / maxq``, ``zero = clamp(-round(min / scale), 0, maxq)``.
"""

from __future__ import annotations

import torch

from .spec import QuantSpec

FLOAT16_TINY = float(torch.finfo(torch.float16).tiny)
FLOAT16_MAX = float(torch.finfo(torch.float16).max)
FLOAT32_TINY = float(torch.finfo(torch.float32).tiny)
MSE_GRID = 100
MSE_MAX_SHRINK = 0.8


def finish_scale(scale: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Replace zero scales by the smallest normal of ``spec.scale_dtype`` and clamp them to its range.

    The values stay float32 and unrounded: codes are chosen under them, and the rounding to float16
    storage happens once, in :func:`qalgos.result.build_logical`.
    """
    if spec.scale_dtype == "float16":
        return scale.clamp(FLOAT16_TINY, FLOAT16_MAX)
    return torch.where(scale == 0, torch.full_like(scale, FLOAT32_TINY), scale)


def codes_of(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, maxq: int) -> torch.Tensor:
    """Float codes ``clamp(round(x / scale) + zero, 0, maxq)``; ``scale``/``zero`` broadcast against ``x``."""
    return torch.clamp(torch.round(x / scale) + zero, 0, maxq)


def dequant_of(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """``scale * (codes - zero)`` in float32."""
    return scale * (codes - zero)


def _gptq_range(x: torch.Tensor, sym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    zero_t = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    xmin = torch.minimum(x.amin(dim=1), zero_t)
    xmax = torch.maximum(x.amax(dim=1), zero_t)
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both_zero = (xmin == 0) & (xmax == 0)
    xmin = torch.where(both_zero, torch.full_like(xmin, -1.0), xmin)
    xmax = torch.where(both_zero, torch.full_like(xmax, 1.0), xmax)
    return xmin, xmax


def _gptq_from_range(xmin: torch.Tensor, xmax: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    scale = finish_scale((xmax - xmin) / spec.maxq, spec)
    if spec.sym:
        zero = torch.full_like(scale, float((spec.maxq + 1) // 2))
    else:
        zero = torch.clamp(torch.round(-xmin / scale), 0, spec.maxq)
    return scale, zero


def gptq_params(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ/RTN scale and zero of each row of ``x: [rows, n]``, with the optional MSE shrink search."""
    xmin, xmax = _gptq_range(x, spec.sym)
    scale, zero = _gptq_from_range(xmin, xmax, spec)
    if spec.mse <= 0:
        return scale, zero
    return _mse_search(x, xmin, xmax, scale, zero, spec)


def _mse_search(
    x: torch.Tensor,
    xmin: torch.Tensor,
    xmax: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    spec: QuantSpec,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shrink the range by ``p = 1 - i/100`` (i < 80); keep per row the pair minimising ``sum |q - x|**mse``.

    For 2-bit asymmetric grids the zero points adjacent to each candidate's are tried too.
    """
    best = torch.full_like(scale, float("inf"))
    best_scale, best_zero = scale.clone(), zero.clone()
    for i in range(int(MSE_MAX_SHRINK * MSE_GRID)):
        p = 1.0 - i / MSE_GRID
        cand_scale, cand_zero = _gptq_from_range(p * xmin, p * xmax, spec)
        zeros = [cand_zero]
        if spec.bits == 2 and not spec.sym:
            zeros += [torch.clamp(cand_zero - 1, 0, spec.maxq), torch.clamp(cand_zero + 1, 0, spec.maxq)]
        for z in zeros:
            q = dequant_of(codes_of(x, cand_scale[:, None], z[:, None], spec.maxq), cand_scale[:, None], z[:, None])
            err = (q - x).abs_().pow_(spec.mse).sum(dim=1)
            better = err < best
            best = torch.where(better, err, best)
            best_scale = torch.where(better, cand_scale, best_scale)
            best_zero = torch.where(better, z, best_zero)
    return best_scale, best_zero


def awq_codes_(rows: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """AWQ codes of every row of a float32 ``rows [n_rows, width]`` (one group a row), written into ``rows``:
    :func:`codes_of`'s operations in their order (``clamp(round(x / scale) + zero, 0, maxq)``), so its values.
    Returns the rows' ``(scale, zero)`` ``[n_rows]`` from :func:`awq_params`; ``rows.sub_(zero).mul_(scale)``
    (broadcast over the row) then gives :func:`dequant_of`'s values."""
    scale, zero = awq_params(rows, spec)
    rows.div_(scale[:, None]).round_().add_(zero[:, None]).clamp_(0, spec.maxq)
    return scale, zero


def awq_params(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """AWQ scale and zero of each row of ``x: [rows, n]`` (the AWQ pseudo-quantizer's formulas). The row's
    ``max |x|`` is taken as ``max(max x, -min x)`` (the same value, without an ``|x|`` copy of ``x``)."""
    xmin, xmax = torch.aminmax(x, dim=1)
    if spec.sym:
        absmax = torch.maximum(xmax, xmin.neg_())
        scale = finish_scale(absmax.clamp(min=1e-5) / ((1 << (spec.bits - 1)) - 1), spec)
        zero = torch.full_like(scale, float(1 << (spec.bits - 1)))
        return scale, zero
    scale = finish_scale((xmax - xmin).clamp(min=1e-5) / spec.maxq, spec)
    zero = torch.clamp(-torch.round(xmin / scale), 0, spec.maxq)
    return scale, zero
