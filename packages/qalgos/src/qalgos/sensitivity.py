"""A cheap, data-aware estimate of how much quantizing one linear weight at a given width hurts.

:func:`weighted_rtn_error` is the input-power-weighted round-to-nearest error

    sum_j p_j * sum_i (W_ij - Q(W)_ij)**2,    p_j = E[x_j**2] over calibration tokens

with ``Q`` RTN under the given spec (its width, groups and symmetry). It is the diagonal approximation of the
expected squared output error per token, ``E ||(W - Q(W)) x||**2``, so the values of different modules add up
to one comparable total (the sensitivity :mod:`qalgos.bit_allocation` trades against stored bits).
"""

from __future__ import annotations

import torch

from .errors import ShapeError
from .rtn import quantize_rtn
from .spec import QuantSpec


def weighted_rtn_error(weight: torch.Tensor, input_power: torch.Tensor, spec: QuantSpec) -> float:
    """The error above for ``weight [out, in]`` (any float dtype) and ``input_power [in]`` (mean squared input
    per column, >= 0); summed in float64 from a float32 RTN at ``spec``."""
    if weight.dim() != 2 or input_power.shape != (weight.shape[1],):
        raise ShapeError(
            f"weighted_rtn_error: expected weight [out, in] and input_power [in], found "
            f"{tuple(weight.shape)} and {tuple(input_power.shape)}"
        )
    w = weight.detach().to(device="cpu", dtype=torch.float32)
    deq = quantize_rtn(w, spec).dequantized.to(torch.float32)
    per_column = ((w - deq).to(torch.float64) ** 2).sum(dim=0)
    return float((per_column * input_power.detach().to(device="cpu", dtype=torch.float64)).sum())
