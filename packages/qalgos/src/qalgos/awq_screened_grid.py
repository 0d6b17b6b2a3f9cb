"""AWQ's grid search with a cheap screening loss: every ratio screened, only the near-best scored exactly.

:func:`qalgos.awq.best_on_grid` scores each of the ``grid`` ratios with the exact loss. When that loss is
expensive (the float64 Gram form of a wide ``down_proj``: one ``[out, in] x [in, in]`` float64 product per
ratio) and a cheaper estimate of it exists (the same product in bfloat16), :func:`best_on_grid_screened`
scores every ratio with the estimate (``screen_of``), then with the exact loss (``loss_of``) only the ratios
whose estimate lies within ``margin`` (relative) of the lowest estimate, and returns the best of those by the
exact loss, the first of equal losses winning as in ``best_on_grid``.

That is ``best_on_grid``'s answer (the same ratio, scales and loss bits) whenever every estimate is within
``margin / 2`` of its exact loss (for every tier): the exact winner's estimate is then within ``margin`` of the lowest
estimate. The search checks this on the ratios it scores exactly: if any of their estimates is off by more
than ``margin / SAFETY`` relative, or an estimate or an exact loss is not finite, it scores every remaining
ratio exactly (``best_on_grid`` itself, at its cost), so a poor estimate costs time, never a different result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .awq import ScaleSearchResult, best_on_grid_from, grid_scales, grid_trial
from .spec import QuantSpec

#: the relative window above the lowest bfloat16 estimate whose ratios go on to the next tier
SCREEN_MARGIN = 0.01
#: the same for the float32 tier (its estimates are about 1e-9 relative off the float64 loss)
FINE_MARGIN = 1e-5
#: the screened losses must be within ``margin / SAFETY`` of the exact ones where both are known
SAFETY = 8.0


def relative_error(estimate: float, exact: float) -> float:
    """``|estimate - exact| / |exact|`` (0 when both are 0, infinite when only ``exact`` is 0 or either is
    not finite)."""
    if not (math.isfinite(estimate) and math.isfinite(exact)):
        return math.inf
    if exact == 0.0:
        return 0.0 if estimate == 0.0 else math.inf
    return abs(estimate - exact) / abs(exact)


def best_on_grid_screened(
    x_mean: torch.Tensor,
    w_mean: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    screens: Sequence[tuple[Callable[[list[torch.Tensor]], float], float]],
    loss_of: Callable[[list[torch.Tensor]], float],
    grid: int = 20,
    duo_scaling: bool = True,
) -> ScaleSearchResult:
    """``best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling)``, computing ``loss_of`` only
    for the ratios that pass every screen: ``screens`` is a list of ``(estimate, margin)`` tiers, cheapest
    first; each tier estimates the ratios the previous one kept and keeps those within its ``margin``
    (relative) of its lowest estimate. Every tier's estimates are checked on the ratios scored exactly (see
    the module docstring); every ratio is scored exactly when one is off. Trial weights are rebuilt per tier
    rather than kept (one ``[out, in]`` trial per linear in memory at a time)."""
    ratios = [i / grid for i in range(grid)]

    def trial(i: int) -> list[torch.Tensor]:
        return grid_trial(weights, grid_scales(x_mean, w_mean, ratios[i], duo_scaling), spec)

    kept = list(range(grid))
    estimates: list[tuple[dict[int, float], float]] = []
    for screen_of, margin in screens:
        screened = {i: screen_of(trial(i)) for i in kept}
        finite = [s for s in screened.values() if math.isfinite(s)]
        floor = min(finite) if finite else math.inf
        kept = [i for i in kept if not math.isfinite(screened[i]) or screened[i] <= floor * (1.0 + margin)]
        estimates.append((screened, margin))
    exact = {i: loss_of(trial(i)) for i in kept}
    if any(relative_error(screened[i], exact[i]) > margin / SAFETY for screened, margin in estimates for i in kept):
        for i in range(grid):  # a poor estimate: every ratio by the exact loss, as best_on_grid
            if i not in exact:
                exact[i] = loss_of(trial(i))
    return best_on_grid_from(x_mean, w_mean, [(ratios[i], exact[i]) for i in sorted(exact)], grid, duo_scaling)
