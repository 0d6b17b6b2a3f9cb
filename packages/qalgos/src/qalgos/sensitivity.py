"""A cheap, data-aware estimate of how much quantizing one linear weight at a given width hurts.

:func:`rtn_noise_to_signal` is the module's output noise-to-signal ratio under round-to-nearest, in the diagonal
approximation of its input statistics:

    sum_j p_j * sum_i (W_ij - Q(W)_ij)**2  /  sum_j p_j * sum_i W_ij**2,    p_j = E[x_j**2]

with ``Q`` RTN under the given spec (its width, groups, symmetry and MSE search; float32 scales). Numerator and
denominator approximate ``E ||(W - Q(W)) x||**2`` and ``E ||W x||**2``. The ratio is free of the scale of the
activations and of the weights, so modules of every layer compare: the absolute error grows with the residual
stream's magnitude in deeper layers, which the next RMSNorm divides away again (measured in docs/algorithms.md:
allocating by the absolute error made SmolLM2 worse than a uniform width, by this ratio better).
"""

from __future__ import annotations

import torch

from .errors import ShapeError
from .group_params import gptq_params
from .rtn import quantize_groups
from .spec import QuantSpec


def rtn_noise_to_signal(weight: torch.Tensor, input_power: torch.Tensor, spec: QuantSpec) -> float:
    """The ratio above for ``weight [out, in]`` (any float dtype) and ``input_power [in]`` (mean squared input per
    column, >= 0), summed in float64; 0.0 when the module's output power is 0 (no input reached it, or a zero
    weight)."""
    if weight.dim() != 2 or input_power.shape != (weight.shape[1],):
        raise ShapeError(
            f"rtn_noise_to_signal: expected weight [out, in] and input_power [in], found "
            f"{tuple(weight.shape)} and {tuple(input_power.shape)}"
        )
    w = weight.detach().to(device="cpu", dtype=torch.float32)
    deq = quantize_groups(w, spec, gptq_params)[3]
    power = input_power.detach().to(device="cpu", dtype=torch.float64)
    noise = float((((w - deq).to(torch.float64) ** 2).sum(dim=0) * power).sum())
    signal = float(((w.to(torch.float64) ** 2).sum(dim=0) * power).sum())
    return noise / signal if signal > 0 else 0.0
