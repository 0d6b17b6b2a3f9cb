"""Choosing per-unit code widths under a stored-bits budget (mixed precision).

A *unit* is a set of modules that must share one width (qhf: the modules of one decoder layer that read one
input, which engines such as vLLM fuse into one ``qkv_proj`` / ``gate_up_proj``). Each unit has a table of
candidates ``(bits, error, cost)``: ``error`` an estimate of the damage quantizing it at ``bits`` does (any
non-negative unit, the same for every unit), ``cost`` the bits its layout stores at that width (codes plus
scales, zeros and ``g_idx``, an integer). The budget is an average of stored bits per weight:

    sum(cost of each unit's chosen candidate) <= floor(budget * sum(weights of every unit))

evaluated exactly (``fractions.Fraction`` of the budget), so a result meets the budget without rounding.

:func:`allocate_bits` starts every unit at its cheapest candidate and spends the rest greedily by marginal
error per stored bit along each unit's lower convex hull of ``(cost, error)``; when the next hull step of a
unit does not fit, the unit leaves the greedy phase. A final phase then moves any unit to any lower-error
candidate that still fits (largest error decrease first) until none fits, so the leftover budget is smaller
than every remaining improving move: the result is within one unit's step of the budget. Ties are broken by
unit order, so the choice is a pure function of the tables and the budget.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .errors import QAlgosError


class BudgetError(QAlgosError, ValueError):
    """A bits budget no choice of candidates can meet, or a malformed candidate table (names which)."""


@dataclass(frozen=True)
class Candidate:
    """One width of a unit: ``bits`` (code width), ``error`` (estimated damage, >= 0) and ``cost`` (stored bits
    of the whole unit at this width, an integer >= 0)."""

    bits: int
    error: float
    cost: int


@dataclass(frozen=True)
class AllocationUnit:
    """Modules that share one width: ``name`` (a label), ``weights`` (their weight count, ``sum(out * in)``)
    and ``candidates`` (one per width, any order)."""

    name: str
    weights: int
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class Allocation:
    """The chosen width per unit (``bits``: name -> width, in unit order), the stored bits they cost (``cost``),
    the weights (``weights``), the summed estimated error (``error``) and the limit they met (``limit``: stored
    bits allowed, ``floor(budget * weights)``)."""

    bits: dict[str, int]
    cost: int
    weights: int
    error: float
    limit: int

    @property
    def bits_per_weight(self) -> float:
        """Achieved stored bits per weight, ``cost / weights``."""
        return self.cost / self.weights


def _checked(units: Sequence[AllocationUnit]) -> None:
    if not units:
        raise BudgetError("units: expected at least one unit to allocate, found none")
    names: set[str] = set()
    for unit in units:
        if unit.name in names:
            raise BudgetError(f"units: {unit.name!r} is listed twice")
        names.add(unit.name)
        if unit.weights <= 0:
            raise BudgetError(f"unit {unit.name!r}: expected a positive weight count, found {unit.weights}")
        if not unit.candidates:
            raise BudgetError(f"unit {unit.name!r}: expected at least one candidate, found none")
        widths = [c.bits for c in unit.candidates]
        if len(set(widths)) != len(widths):
            raise BudgetError(f"unit {unit.name!r}: a width is listed twice in {widths}")
        for c in unit.candidates:
            if not math.isfinite(c.error) or c.error < 0:
                raise BudgetError(f"unit {unit.name!r}, {c.bits}-bit: expected a finite error >= 0, found {c.error}")
            if isinstance(c.cost, bool) or not isinstance(c.cost, int) or c.cost < 0:
                raise BudgetError(f"unit {unit.name!r}, {c.bits}-bit: expected an integer cost >= 0, found {c.cost!r}")


def budget_range(units: Sequence[AllocationUnit]) -> tuple[float, float]:
    """The smallest and largest achievable average stored bits per weight (every unit at its cheapest / its
    most expensive candidate)."""
    _checked(units)
    weights = sum(u.weights for u in units)
    low = sum(min(c.cost for c in u.candidates) for u in units)
    high = sum(max(c.cost for c in u.candidates) for u in units)
    return low / weights, high / weights


def _frontier(unit: AllocationUnit) -> list[Candidate]:
    """The candidates no cheaper-or-equal candidate beats: by rising cost, strictly falling error (at equal
    cost the lower error, then the smaller width)."""
    ordered = sorted(unit.candidates, key=lambda c: (c.cost, c.error, c.bits))
    out: list[Candidate] = []
    for c in ordered:  # at equal cost the first (lowest error) wins: a later one never has a lower error
        if not out or c.error < out[-1].error:
            out.append(c)
    return out


def _hull(front: list[Candidate]) -> list[int]:
    """Indices into ``front`` of its lower convex hull (falling marginal error per bit), from the cheapest."""
    hull: list[int] = []
    for i, c in enumerate(front):
        while len(hull) >= 2:
            a, b = front[hull[-2]], front[hull[-1]]
            # b is not on the hull when the slope a->c is at least as steep (more error saved per bit) as a->b
            if (a.error - c.error) * (b.cost - a.cost) >= (a.error - b.error) * (c.cost - a.cost):
                hull.pop()
            else:
                break
        hull.append(i)
    return hull


def allocate_bits(units: Sequence[AllocationUnit], budget: float) -> Allocation:
    """Each unit's width so that the stored bits per weight are at most ``budget`` and the summed error is
    small (module docstring). Raises :class:`BudgetError` when even the cheapest choice exceeds the budget
    or when the budget pays for at least one stored bit more than the most expensive choice (naming the
    achievable range)."""
    _checked(units)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget):
        raise BudgetError(f"budget: expected a finite number of bits per weight, found {budget!r}")
    weights = sum(u.weights for u in units)
    limit = math.floor(Fraction(budget) * weights)
    low, high = budget_range(units)
    fronts = [_frontier(u) for u in units]
    spent = sum(f[0].cost for f in fronts)
    if spent > limit:
        raise BudgetError(
            f"bits_budget: {budget} bits per weight is below the cheapest choice ({low:.4f}; achievable "
            f"{low:.4f} .. {high:.4f})"
        )
    if limit > sum(max(c.cost for c in u.candidates) for u in units):  # a whole stored bit more than the widest
        raise BudgetError(
            f"bits_budget: {budget} bits per weight is above the most expensive choice ({high:.4f}; achievable "
            f"{low:.4f} .. {high:.4f})"
        )
    at = [0] * len(units)  # index into each unit's frontier
    hulls = [_hull(f) for f in fronts]
    step = [0] * len(units)  # position in each unit's hull
    heap: list[tuple[float, int]] = []

    def push(u: int) -> None:
        h = hulls[u]
        if step[u] + 1 < len(h):
            a, b = fronts[u][h[step[u]]], fronts[u][h[step[u] + 1]]
            heapq.heappush(heap, (-(a.error - b.error) / (b.cost - a.cost), u))

    for u in range(len(units)):
        push(u)
    while heap:
        _, u = heapq.heappop(heap)
        nxt = hulls[u][step[u] + 1]
        extra = fronts[u][nxt].cost - fronts[u][at[u]].cost
        if spent + extra > limit:
            continue  # this unit leaves the greedy phase; the final phase may still move it
        spent += extra
        step[u] += 1
        at[u] = nxt
        push(u)
    while True:  # final phase: any single improving move that fits, largest error decrease first
        best: tuple[float, int, int] | None = None
        for u, front in enumerate(fronts):
            cur = front[at[u]]
            for i in range(at[u] + 1, len(front)):
                if spent + front[i].cost - cur.cost <= limit:
                    gain = cur.error - front[i].error
                    if best is None or gain > best[0]:
                        best = (gain, u, i)
        if best is None:
            break
        _, u, i = best
        spent += fronts[u][i].cost - fronts[u][at[u]].cost
        at[u] = i
    chosen = [fronts[u][at[u]] for u in range(len(units))]
    cost = sum(c.cost for c in chosen)
    if cost != spent or cost > limit:  # the exact check of the contract, not an assert
        raise BudgetError(f"allocation: chose {cost} stored bits against a limit of {limit} (spent {spent})")
    return Allocation(
        bits={u.name: c.bits for u, c in zip(units, chosen, strict=True)},
        cost=cost,
        weights=weights,
        error=sum(c.error for c in chosen),
        limit=limit,
    )
