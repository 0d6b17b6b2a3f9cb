"""AWQ's grid search scored in reduced precision, with every near-best ratio re-scored in float64 and chosen by it.

:func:`qalgos.awq.best_on_grid` scores each of the ``grid`` ratios with the float64 loss. When that loss is
expensive (the Gram form of a wide ``down_proj``: one float64 ``[out, in] x [in, in]`` product per ratio, 1.7
TFLOP at the 8B shape) and the same loss in float32 is about twice as fast, :func:`best_on_grid_rescored`
scores every ratio in float32 (``estimate_of``), then in float64 (``loss_of``) every ratio whose float32 loss
could be the float64 best, and chooses by float64 among those (the first of equal losses winning, as in
``best_on_grid``). With ``coarse_of`` (the same loss in bfloat16, about 2.4x faster than float32 on a CPU with
native bfloat16 dot products) a first tier narrows the ratios the float32 tier scores, by the same rule.

Which ratios could be the float64 best follows from an error estimate ``E`` (relative) of the tier:

* measured: the tier's best ratio is always scored by the next tier too; ``e = |L - L64| / L64`` there for
  float32, ``e = |L - L32| / L32`` for bfloat16 (its float32 loss, which the float32 tier needs anyway, since the
  bfloat16 best is always kept: float32's own error, about 1e-9, is far under bfloat16's floor; so the bfloat16
  tier adds no float64 product);
* ``E = max(SAFETY * e, floor)``: ``SAFETY`` (64) for ratios whose errors are larger than the measured one, the
  floor for a measured error that is small by luck: for float32, ``sqrt(in)`` float32 ulps (the probabilistic
  rounding error of one length-``in`` float32 dot product); for bfloat16, :data:`BF16_FLOOR` (half of
  bfloat16's unit roundoff, above every bfloat16 error measured on the tests' and the 8B-shaped benchmark's
  inputs: 5e-6 to 5e-4).

If every ratio's loss in the tier is within ``E`` of its float64 loss, the float64 winner ``w`` has
``L_w <= (1 + E) L64_w <= (1 + E) L64_b <= L_b (1 + E) / (1 - E)``, so re-scoring every ratio with
``L <= L_b (1 + E) / (1 - E)`` (``b``: the tier's best) gives ``best_on_grid``'s ratio, scales and loss bits.

Tiers: bfloat16 (``coarse_of``, when given) on all ratios; float32 on the ratios the bfloat16 rule keeps
(all when there is no bfloat16 tier); float64 on the ratios the float32 rule keeps among those. The float64
winner is among the bfloat16 tier's kept ratios (its premise), and among those the float32 rule keeps it (the
float32 premise, the argument above restricted to the kept set, whose float32 best need not be the global one
but whose float64 best is the global one).

The premises are checked on every ratio scored in the next tier: a bfloat16 loss must be within ``E16`` of the
float64 loss (where computed) or, through the float32 loss, ``r (1 + E32) + E32 <= E16`` with ``r`` its
relative distance to the float32 loss; a float32 loss must be within ``E32`` of the float64 loss. If the
bfloat16 check fails (or a bfloat16 loss is not finite, or ``E16 >= 1``) every ratio is scored in float32 (the
search without the bfloat16 tier); if the float32 check fails (or a float32 loss is not finite, or
``E32 >= 1``) every ratio is scored in float64 (``best_on_grid`` itself). The premises are not proven for the
ratios a tier drops: the selection can differ from scoring all in float64 only if one of them is off by more
than ``E`` while every checked one is within it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .awq import ScaleSearchResult, best_on_grid_from, grid_scales, grid_trial
from .scratch_buffers import ScratchBuffers
from .spec import QuantSpec

logger = logging.getLogger(__name__)

#: the multiple of a tier's measured error (at its best ratio) assumed for every ratio
SAFETY = 64.0
#: float32's unit roundoff (half an ulp at 1)
EPS32 = float(torch.finfo(torch.float32).eps) / 2
#: bfloat16's unit roundoff (half an ulp at 1: 2**-8)
EPS_BF16 = float(torch.finfo(torch.bfloat16).eps) / 2
#: the bfloat16 tier's floor on ``E`` (relative): half of bfloat16's unit roundoff, 2**-9 (about 2e-3)
BF16_FLOOR = EPS_BF16 / 2

Loss = Callable[[list[torch.Tensor]], float]


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


def bfloat16_error_estimate(measured: float) -> float:
    """``E`` (relative) of every ratio's bfloat16 loss: ``max(SAFETY * measured, BF16_FLOOR)``; ``measured``:
    the bfloat16 best ratio's relative error against its float32 loss."""
    return max(SAFETY * measured, BF16_FLOOR)


@dataclass(frozen=True)
class RescoreCount:
    """How a :func:`best_on_grid_rescored` search went: ``float32`` and ``float64`` losses computed,
    ``estimate`` the float32 error estimate ``E`` used (infinite when not reached), ``fell_back`` whether every
    ratio was scored in float64; ``bfloat16`` losses computed (0 without that tier), ``bfloat16_estimate`` its
    ``E`` and ``bfloat16_fell_back`` whether its check failed and every ratio was scored in float32."""

    float32: int
    float64: int
    estimate: float
    fell_back: bool
    bfloat16: int = 0
    bfloat16_estimate: float = math.inf
    bfloat16_fell_back: bool = False


def within(scores: dict[int, float], estimate: float) -> list[int] | None:
    """The indices whose score is within ``estimate`` of the best's: ``L <= L_b (1 + E) / (1 - E)``, in index
    order; None when a score is not finite or ``E >= 1``."""
    if not scores or not all(math.isfinite(v) for v in scores.values()) or not estimate < 1.0:
        return None
    ceiling = min(scores.values()) * (1.0 + estimate) / (1.0 - estimate)
    return [i for i in sorted(scores) if scores[i] <= ceiling]


def near_best(
    scores: dict[int, float],
    reference: dict[int, float],
    reference_of: Callable[[int], float],
    estimate_of_error: Callable[[float], float],
) -> tuple[float, list[int] | None]:
    """One tier's rule: ``(E, kept)``. ``scores``: the tier's loss per ratio index; ``reference``: the more exact
    losses so far (float64 for the float32 tier, float32 for the bfloat16 one; the tier's best is added, by
    ``reference_of(i)``); ``estimate_of_error``: ``E`` from the measured relative error. ``kept``: the indices
    with ``L <= L_b (1 + E) / (1 - E)`` in index order, None when a score is not finite or ``E >= 1`` (the
    caller falls back)."""
    if not scores or not all(math.isfinite(v) for v in scores.values()):
        return math.inf, None
    best = min(scores, key=lambda i: (scores[i], i))  # the first of equal scores
    if best not in reference:
        reference[best] = reference_of(best)
    estimate = estimate_of_error(relative_error(scores[best], reference[best]))
    return estimate, within(scores, estimate)


def bfloat16_premise_holds(
    coarse: float, float32: float, exact: float | None, coarse_estimate: float, estimate: float
) -> bool:
    """Whether a bfloat16 loss is within ``coarse_estimate`` (relative) of the float64 loss: checked against
    ``exact`` when known, else through the float32 loss (within ``estimate`` of the float64 one):
    ``r (1 + estimate) + estimate <= coarse_estimate`` with ``r`` the relative distance to ``float32``."""
    if exact is not None:
        return relative_error(coarse, exact) <= coarse_estimate
    return relative_error(coarse, float32) * (1.0 + estimate) + estimate <= coarse_estimate


def best_on_grid_rescored(
    x_mean: torch.Tensor,
    w_mean: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    estimate_of: Loss,
    loss_of: Loss,
    grid: int = 20,
    duo_scaling: bool = True,
    counts: list[RescoreCount] | None = None,
    coarse_of: Loss | None = None,
    scratch: ScratchBuffers | None = None,
    before_float32: Callable[[int], None] | None = None,
) -> ScaleSearchResult:
    """``best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling)`` computing ``loss_of``
    (float64) only for the ratios whose ``estimate_of`` (the same loss in float32) is within the float32 error
    estimate of the float32 best, and, with ``coarse_of`` (the same loss in bfloat16), ``estimate_of`` only for
    the ratios whose bfloat16 loss is within the bfloat16 error estimate of the bfloat16 best (see the module
    docstring). Trial weights are rebuilt for each tier rather than kept (one ``[out, in]`` trial per linear in
    memory at a time; with ``scratch`` written into its tensors, :func:`qalgos.awq.grid_trial`). ``counts``: a list to
    append the search's :class:`RescoreCount` to. ``before_float32``: called with the number of ratios the float32
    tier is about to score, before it scores them (and again before a bfloat16 fall-back scores the rest), so
    ``estimate_of`` can pick a form whose set-up pays for that many."""
    ratios = [i / grid for i in range(grid)]
    everything = list(range(grid))
    width = int(weights[0].shape[-1]) if weights else 1

    def trial(i: int) -> list[torch.Tensor]:
        return grid_trial(weights, grid_scales(x_mean, w_mean, ratios[i], duo_scaling), spec, scratch)

    def exact_of(i: int) -> float:
        return loss_of(trial(i))

    def float32_of(i: int) -> float:
        return estimate_of(trial(i))

    def float32_error(measured: float) -> float:
        return error_estimate(measured, width)

    exact: dict[int, float] = {}
    estimates: dict[int, float] = {}
    candidates: list[int] | None = everything
    coarse: dict[int, float] = {}
    coarse_estimate = math.inf
    coarse_fell_back = False
    if coarse_of is not None:
        coarse = {i: coarse_of(trial(i)) for i in everything}
        if before_float32 is not None:  # at least the ratios within the floor go on to float32
            before_float32(len(within(coarse, BF16_FLOOR) or everything))
        coarse_estimate, candidates = near_best(coarse, estimates, float32_of, bfloat16_error_estimate)
        coarse_fell_back = candidates is None
    elif before_float32 is not None:
        before_float32(grid)
    estimates.update({i: float32_of(i) for i in candidates or everything if i not in estimates})
    estimate, kept = near_best(estimates, exact, exact_of, float32_error)
    if coarse and not coarse_fell_back and len(estimates) < grid:
        coarse_fell_back = not all(
            bfloat16_premise_holds(coarse[i], estimates[i], exact.get(i), coarse_estimate, estimate) for i in estimates
        )
        if coarse_fell_back:
            logger.info(
                "AWQ scale search: a bfloat16 loss was off by more than the estimate %.3g: every one of the %d "
                "ratios scored in float32",
                coarse_estimate,
                grid,
            )
            if before_float32 is not None:
                before_float32(grid - len(estimates))
            estimates.update({i: float32_of(i) for i in everything if i not in estimates})
            estimate, kept = near_best(estimates, exact, exact_of, float32_error)
    fell_back = kept is None
    if kept is not None:
        exact.update({i: exact_of(i) for i in kept if i not in exact})
        fell_back = any(relative_error(estimates[i], exact[i]) > estimate for i in exact)
    if fell_back:
        logger.info(
            "AWQ scale search: a float32 loss was off by more than the estimate %.3g (or not finite): every one "
            "of the %d ratios scored in float64",
            estimate,
            grid,
        )
        exact.update({i: exact_of(i) for i in everything if i not in exact})
    if counts is not None:
        counts.append(
            RescoreCount(
                len(estimates), len(exact), estimate, fell_back, len(coarse), coarse_estimate, coarse_fell_back
            )
        )
    return best_on_grid_from(x_mean, w_mean, [(ratios[i], exact[i]) for i in sorted(exact)], grid, duo_scaling)
