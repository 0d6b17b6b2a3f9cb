"""Widths under a stored-bits budget: the budget is met exactly, the leftover is below every improving move,
sensitive units get the bits, and impossible budgets are refused naming the achievable range."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from qalgos.bit_allocation import AllocationUnit, BudgetError, Candidate, allocate_bits, budget_range

WIDTHS = (2, 3, 4, 8)


def unit(name: str, weights: int, scale: float, overhead: int = 0) -> AllocationUnit:
    """A unit whose error halves-ish per bit (``scale * 4**-bits``) and whose cost is ``bits * weights +
    overhead`` (the scales and zeros a layout adds)."""
    return AllocationUnit(name, weights, tuple(Candidate(b, scale * 4.0**-b, b * weights + overhead) for b in WIDTHS))


def random_units(seed: int, count: int = 12) -> list[AllocationUnit]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        weights = rng.choice([64, 128, 512, 4096])
        scale = rng.uniform(0.01, 100.0)
        out.append(unit(f"u{i}", weights, scale, overhead=rng.randrange(0, 64)))
    return out


def improving_moves_that_fit(units: list[AllocationUnit], chosen: dict[str, int], budget: float) -> list[str]:
    """Every single-unit change to a lower-error width that the remaining budget still pays for."""
    limit = math.floor(Fraction(budget) * sum(u.weights for u in units))
    by_bits = {u.name: {c.bits: c for c in u.candidates} for u in units}
    spent = sum(by_bits[u.name][chosen[u.name]].cost for u in units)
    moves = []
    for u in units:
        current = by_bits[u.name][chosen[u.name]]
        for c in u.candidates:
            if c.error < current.error and spent - current.cost + c.cost <= limit:
                moves.append(f"{u.name}: {current.bits} -> {c.bits}")
    return moves


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.37, 0.5, 0.83, 1.0])
def test_meets_the_budget_and_leaves_less_than_any_improving_move(seed: int, fraction: float) -> None:
    units = random_units(seed)
    low, high = budget_range(units)
    budget = min(max(low + fraction * (high - low), low + 1e-9), high)
    result = allocate_bits(units, budget)
    costs = {u.name: {c.bits: c.cost for c in u.candidates} for u in units}
    spent = sum(costs[name][bits] for name, bits in result.bits.items())
    assert spent == result.cost <= result.limit == math.floor(Fraction(budget) * result.weights)
    assert result.bits_per_weight <= budget
    assert improving_moves_that_fit(units, result.bits, budget) == []
    assert list(result.bits) == [u.name for u in units]


def test_the_budget_goes_to_the_sensitive_unit() -> None:
    # two units of equal size and cost; "sharp" loses 100x more than "flat" at every width
    units = [unit("flat", 1024, 1.0), unit("sharp", 1024, 100.0)]
    # room for one unit at 8 bits and the other at 4: the sensitive one gets the 8
    result = allocate_bits(units, (8 + 4) / 2)
    assert result.bits == {"flat": 4, "sharp": 8}
    # the same tables listed the other way round choose the same widths
    assert allocate_bits(units[::-1], 6.0).bits == {"sharp": 8, "flat": 4}
    # a large unit 1000x as sensitive takes the 8 bits even though they cost 16x the small unit's 8 bits:
    # (large 8, small 2) fits 7.7 bits per weight and (large 8, small 3) does not
    big = [unit("small", 256, 1.0), unit("large", 4096, 1000.0)]
    assert allocate_bits(big, 7.7).bits == {"small": 2, "large": 8}


def test_budget_edges_give_uniform_widths() -> None:
    units = random_units(3)
    low, high = budget_range(units)
    weights = sum(u.weights for u in units)
    # the range ends as floats may round either way: a hair inside them
    at_low = allocate_bits(units, low + 1e-9)
    assert set(at_low.bits.values()) == {2} and at_low.cost == sum(min(c.cost for c in u.candidates) for u in units)
    at_high = allocate_bits(units, high + 1e-9)
    assert set(at_high.bits.values()) == {8} and at_high.cost / weights == pytest.approx(high)


def test_impossible_budgets_are_refused_with_the_range() -> None:
    units = random_units(1)
    low, high = budget_range(units)
    with pytest.raises(BudgetError, match=r"below the cheapest choice.*achievable"):
        allocate_bits(units, low - 0.01)
    with pytest.raises(BudgetError, match=r"above the most expensive choice.*achievable"):
        allocate_bits(units, high + 0.01)
    with pytest.raises(BudgetError, match="budget: expected a finite number"):
        allocate_bits(units, float("nan"))


def test_malformed_tables_are_refused_naming_the_unit() -> None:
    good = unit("a", 64, 1.0)
    with pytest.raises(BudgetError, match="at least one unit"):
        allocate_bits([], 4.0)
    with pytest.raises(BudgetError, match="'a' is listed twice"):
        allocate_bits([good, good], 4.0)
    bad_error = AllocationUnit("b", 64, (Candidate(4, float("inf"), 256),))
    with pytest.raises(BudgetError, match=r"unit 'b', 4-bit: expected a finite error"):
        allocate_bits([bad_error], 4.0)
    twice = AllocationUnit("c", 64, (Candidate(4, 1.0, 256), Candidate(4, 0.5, 300)))
    with pytest.raises(BudgetError, match="unit 'c': a width is listed twice"):
        allocate_bits([twice], 4.0)


def test_a_dominated_width_is_never_chosen() -> None:
    # 3 bits costs more than 4 here (a layout padding 3-bit rows) and is worse: never chosen
    odd = AllocationUnit("odd", 100, (Candidate(3, 5.0, 500), Candidate(4, 1.0, 400), Candidate(8, 0.1, 800)))
    for budget in (4.0, 4.5, 5.0, 7.99, 8.0):
        assert allocate_bits([odd], budget).bits["odd"] in (4, 8)


def test_deterministic() -> None:
    units = random_units(7, count=40)
    low, high = budget_range(units)
    budget = (low + high) / 2
    assert allocate_bits(units, budget) == allocate_bits(list(units), budget)
