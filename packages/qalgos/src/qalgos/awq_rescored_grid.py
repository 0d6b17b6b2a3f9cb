"""AWQ's grid search scored in float32, with every near-best ratio re-scored in float64 and chosen by it.

:func:`qalgos.awq.best_on_grid` scores each of the ``grid`` ratios with the float64 loss. When that loss is
expensive (the Gram form of a wide ``down_proj``: one float64 ``[out, in] x [in, in]`` product per ratio, 1.7
TFLOP at the 8B shape) and the same loss in float32 is about twice as fast, :func:`best_on_grid_rescored`
scores every ratio in float32 (``estimate_of``), then in float64 (``loss_of``) every ratio whose float32 loss
could be the float64 best, and chooses by float64 among those (the first of equal losses winning, as in
``best_on_grid``).

Which ratios could be the float64 best follows from a float32 error estimate ``E`` (relative):

* measured: the float32 best ratio is always scored in float64 too; ``e = |L32 - L64| / L64`` there;
* ``E = max(SAFETY * e, sqrt(in) * eps32)``: ``SAFETY`` (64) for ratios whose errors are larger than the
  measured one, the floor (``sqrt(in)`` float32 ulps: the probabilistic rounding error of one length-``in``
  float32 dot product) for a measured error that is small by luck.

If every ratio's float32 loss is within ``E`` of its float64 loss, the float64 winner ``w`` has
``L32_w <= (1 + E) L64_w <= (1 + E) L64_b <= L32_b (1 + E) / (1 - E)``, so re-scoring every ratio with
``L32 <= L32_b (1 + E) / (1 - E)`` (``b``: the float32 best) gives ``best_on_grid``'s ratio, scales and loss
bits. That premise is checked on every re-scored ratio (its float32 error must be within ``E``); if one is off,
or a loss is not finite, or ``E >= 1``, every ratio is scored in float64 (``best_on_grid`` itself). It is not
proven for the ratios that were not re-scored: the selection can differ from scoring all in float64 only if
one of them is off by more than ``E`` while every checked one is within it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .awq import ScaleSearchResult, best_on_grid_from, grid_scales, grid_trial
from .spec import QuantSpec

logger = logging.getLogger(__name__)

#: the multiple of the measured float32 error (at the float32 best ratio) assumed for every ratio
SAFETY = 64.0
#: float32's unit roundoff (half an ulp at 1)
EPS32 = float(torch.finfo(torch.float32).eps) / 2


def relative_error(estimate: float, exact: float) -> float:
    """``|estimate - exact| / |exact|`` (0 when both are 0, infinite when only ``exact`` is 0 or either is
    not finite)."""
    if not (math.isfinite(estimate) and math.isfinite(exact)):
        return math.inf
    if exact == 0.0:
        return 0.0 if estimate == 0.0 else math.inf
    return abs(estimate - exact) / abs(exact)


def error_estimate(measured: float, width: int) -> float:
    """``E`` (relative) of every ratio's float32 loss: ``max(SAFETY * measured, sqrt(width) * EPS32)``;
    ``measured``: the float32 best ratio's relative error, ``width``: the dot products' length (``in``)."""
    return max(SAFETY * measured, math.sqrt(max(1, width)) * EPS32)


@dataclass(frozen=True)
class RescoreCount:
    """How a :func:`best_on_grid_rescored` search went: ``float32`` and ``float64`` losses computed,
    ``estimate`` the error estimate ``E`` used, ``fell_back`` whether every ratio was scored in float64."""

    float32: int
    float64: int
    estimate: float
    fell_back: bool


def best_on_grid_rescored(
    x_mean: torch.Tensor,
    w_mean: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    estimate_of: Callable[[list[torch.Tensor]], float],
    loss_of: Callable[[list[torch.Tensor]], float],
    grid: int = 20,
    duo_scaling: bool = True,
    counts: list[RescoreCount] | None = None,
) -> ScaleSearchResult:
    """``best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling)`` computing ``loss_of`` (float64)
    only for the ratios whose ``estimate_of`` (the same loss in float32) is within the float32 error estimate of
    the float32 best (see the module docstring). Trial weights are rebuilt for the re-scoring rather than kept
    (one ``[out, in]`` trial per linear in memory at a time). ``counts``: a list to append the search's
    :class:`RescoreCount` to."""
    ratios = [i / grid for i in range(grid)]
    width = int(weights[0].shape[-1]) if weights else 1

    def trial(i: int) -> list[torch.Tensor]:
        return grid_trial(weights, grid_scales(x_mean, w_mean, ratios[i], duo_scaling), spec)

    estimates = [estimate_of(trial(i)) for i in range(grid)]
    finite = [i for i in range(grid) if math.isfinite(estimates[i])]
    exact: dict[int, float] = {}
    fell_back = True
    estimate = math.inf
    if finite:
        best = min(finite, key=lambda i: estimates[i])  # the first of equal estimates
        exact[best] = loss_of(trial(best))
        estimate = error_estimate(relative_error(estimates[best], exact[best]), width)
        if estimate < 1.0:
            ceiling = estimates[best] * (1.0 + estimate) / (1.0 - estimate)
            for i in range(grid):
                if i not in exact and not (estimates[i] <= ceiling):  # a non-finite estimate is re-scored
                    continue
                if i not in exact:
                    exact[i] = loss_of(trial(i))
            fell_back = any(relative_error(estimates[i], exact[i]) > estimate for i in exact)
    if fell_back:
        logger.info(
            "AWQ scale search: a float32 loss was off by more than the estimate %.3g (or not finite): every one "
            "of the %d ratios scored in float64",
            estimate,
            grid,
        )
        for i in range(grid):
            if i not in exact:
                exact[i] = loss_of(trial(i))
    if counts is not None:
        counts.append(RescoreCount(grid, len(exact), estimate, fell_back))
    return best_on_grid_from(x_mean, w_mean, [(ratios[i], exact[i]) for i in sorted(exact)], grid, duo_scaling)
