"""The mixed-precision step of a run: checked before any work, resolved into ``dynamic`` rules before the loop.

:func:`plan_budget` (before calibration) builds the units and their stored bits at every candidate width from the
source's structure and refuses a budget outside the achievable range (:class:`~qhf.errors.BitsBudgetError`
naming both ends). A config that already has ``dynamic`` rules (a saved config, or the user's own widths) is
reproduced as given: its stored bits per weight must meet the budget.

:meth:`BudgetPlan.resolve` (after calibration, before the loop) runs the sensitivity pass, allocates
(:func:`qalgos.bit_allocation.allocate_bits`: sum of the unit costs <= ``floor(budget * weights)``), writes the
rules and returns the config that carries them plus the run's record (``QuantizeSummary.mixed_precision``).

Stored bits per weight (the budget's unit) = sum over the quantized decoder-layer modules of the bits the
layout stores for them (packed codes, scales, zeros, ``g_idx``) / the sum of their ``out * in``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from qalgos.bit_allocation import AllocationUnit, BudgetError, Candidate, allocate_bits
from qformats.config import QuantizeConfig
from qlooper.calibration import CalibrationSet

from ..config_view import bits_budget, setting
from ..errors import BitsBudgetError
from ..source.opened_source import OpenedSource
from .rules import check_rules, dynamic_rules
from .sensitivity import Sensitivity, measure_sensitivity
from .units import StoredBits, Unit, budget_units


@dataclass
class BudgetPlan:
    """A run's budget: ``budget`` (stored bits per weight), ``candidates``, the ``units`` and their ``costs``
    (unit key -> {width: stored bits}); ``given``: the record of a config whose rules were given (then nothing is
    allocated)."""

    budget: float
    candidates: tuple[int, ...]
    units: list[Unit]
    costs: dict[str, dict[int, int]] = field(default_factory=dict)
    given: dict[str, Any] | None = None

    @property
    def needs_allocation(self) -> bool:
        return self.given is None

    def resolve(
        self,
        config: QuantizeConfig,
        source: OpenedSource,
        calibration: CalibrationSet,
        spec: Any,
        *,
        device: Any = None,
        cache_device: str = "cpu",
    ) -> tuple[QuantizeConfig, dict[str, Any]]:
        """Measure, allocate and write the rules: ``(config with its dynamic rules, record)``. ``spec``: the run's
        qalgos ``QuantSpec`` (its group size and symmetry are the sensitivity pass's)."""
        found = measure_sensitivity(
            source,
            calibration,
            spec,
            self.candidates,
            format=str(config.format),
            device=device,
            cache_device=cache_device,
        )
        allocation = allocate_bits(self._allocation_units(found), self.budget)
        rules = dynamic_rules(self.units, allocation.bits, config.width)
        resolved = config.with_changes(dynamic=rules or None)
        check_rules(resolved, self.units, allocation.bits)
        widths = {m.name: allocation.bits[u.key] for u in self.units for m in u.members}
        record = _record(self.budget, self.candidates, widths, allocation.cost, allocation.weights)
        record["uniform_bits_per_weight"] = self._uniform(config.width)
        record["sensitivity"] = {
            "rows": found.rows,
            "tokens": found.tokens,
            "seconds": found.seconds,
            "cpu_seconds": found.cpu_seconds,
        }
        record["rules"] = len(rules)
        return resolved, record

    def _allocation_units(self, found: Sensitivity) -> list[AllocationUnit]:
        out = []
        for unit in self.units:
            candidates = tuple(
                Candidate(bits, sum(found.errors[m.name][bits] for m in unit.members), self.costs[unit.key][bits])
                for bits in self.candidates
            )
            out.append(AllocationUnit(unit.key, unit.weights, candidates))
        return out

    def _uniform(self, bits: int) -> float | None:
        """Stored bits per weight with every module at ``bits`` (None when ``bits`` is not a candidate)."""
        if bits not in self.candidates:
            return None
        weights = sum(u.weights for u in self.units)
        return round(sum(self.costs[u.key][bits] for u in self.units) / weights, 6)


def _record(
    budget: float, candidates: tuple[int, ...], widths: dict[str, int], cost: int, weights: int
) -> dict[str, Any]:
    counts = {str(b): sum(1 for w in widths.values() if w == b) for b in sorted(set(widths.values()))}
    return {
        "bits_budget": budget,
        "bits_candidates": list(candidates),
        "bits_per_weight": round(cost / weights, 6),
        "stored_bits": cost,
        "weights": weights,
        "modules_by_bits": counts,
        "bits": widths,
    }


def plan_budget(config: QuantizeConfig, source: OpenedSource) -> BudgetPlan | None:
    """The run's :class:`BudgetPlan` (None without a ``bits_budget``), refusing, before any work, a budget no
    choice of candidate widths can meet or one the given ``dynamic`` rules exceed."""
    budget = bits_budget(config)
    if budget is None:
        return None
    candidates = tuple(int(b) for b in setting(config, "bits_candidates"))
    units = budget_units(source)
    stored = StoredBits(config)
    if config.rules is not None:
        cost, weights = stored.as_configured(m for u in units for m in u.members)
        if cost > math.floor(Fraction(budget) * weights):
            raise BitsBudgetError(
                f"bits_budget: the config's dynamic rules store {cost / weights:.4f} bits per weight, above the "
                f"budget {budget} (a config with rules is quantized as given; drop dynamic to allocate)"
            )
        widths = {}
        for unit in units:
            for member in unit.members:
                spec = config.for_module(member.name)
                if spec is not None:
                    widths[member.name] = spec.bits
        given = _record(budget, candidates, widths, cost, weights)
        given["rules"] = "as given"
        return BudgetPlan(budget, candidates, units, given=given)
    costs = {u.key: {b: stored.unit(u, b) for b in candidates} for u in units}
    plan = BudgetPlan(budget, candidates, units, costs)
    probe = [
        AllocationUnit(u.key, u.weights, tuple(Candidate(b, 0.0, costs[u.key][b]) for b in candidates)) for u in units
    ]
    try:
        allocate_bits(probe, budget)  # the range check the allocation makes, exact, with no error measured yet
    except BudgetError as exc:
        lower = " (a lower bits, or narrower bits_candidates, go lower)" if min(candidates) > 2 else ""
        raise BitsBudgetError(
            f"{exc}, with widths {list(candidates)} in format {config.format!r} group {config.group_size} "
            f"({min(candidates)}-bit everywhere .. {max(candidates)}-bit everywhere){lower}"
        ) from None
    return plan
