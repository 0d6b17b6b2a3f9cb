"""Rates of the cost model (benchmarks/scaling_model.py) fitted on a measured sharded run, and the model's
prediction of another worker count from them.

Input: the executor's per-layer ``LayerTimes`` (qlooper.executor; dicts with ``forward``, ``reduce``, ``solve``,
``transfer``, ``layer_ship`` seconds and ``bytes_out``/``bytes_back``) of a run of the executor as built
(:data:`scaling_model.BUILT`). Each rate is the model's work for that item at unit rates over the measured
median seconds: forward flop/s per worker, the driver's Hessian flop/s, the transfer bytes/s (batches,
recordings, outputs and changed parameters together), the solve flop/s (after the solve jobs' bytes at that
transfer rate) and the first copy's bytes/s.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from scaling_model import BUILT, Calibration, Design, LayerCost, Rates, layer_cost
from scaling_shapes import Shape

ITEMS = ("forward", "reduce", "solve", "transfer", "layer_ship")


def medians(layers: list[dict[str, float]]) -> dict[str, float]:
    """Median per layer of each LayerTimes item and of the bytes moved (``bytes_out + bytes_back``)."""
    out = {k: statistics.median(t[k] for t in layers) for k in ITEMS}
    out["bytes"] = statistics.median(t["bytes_out"] + t["bytes_back"] for t in layers)
    return out


def unit_rates(wire_bytes: int, lanes: float) -> Rates:
    """Every rate 1 (an item then reads as its work: flops or bytes), no latency."""
    return Rates(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, wire_bytes, 1.0, lanes)


@dataclass(frozen=True)
class Fit:
    """Fitted ``rates``; ``other``: the measured layer wall outside the executor's items (the driver's loop,
    packing, finalizers), carried over unchanged to other worker counts; ``design``: the executor fitted."""

    rates: Rates
    other: float
    design: Design = BUILT


def fit_rates(
    shape: Shape,
    cal: Calibration,
    workers: int,
    measured: dict[str, float],
    *,
    wire_bytes: int,
    lanes: float,
    layer_wall: float | None = None,
    design: Design = BUILT,
    driver_share: float = 1.0,
) -> Fit:
    """Rates from ``measured`` medians (:func:`medians`) of a run on ``workers`` workers of the executor
    ``design`` describes (its transport: e.g. one shared-memory copy on a local cluster); ``driver_share``: see
    :class:`~scaling_model.Rates` (not fitted: one worker count cannot tell it)."""
    work = layer_cost(shape, cal, workers, design, replace(unit_rates(wire_bytes, lanes), driver_share=driver_share))
    link = (work.activations + work.changed_params) / measured["transfer"]
    solve_time = max(measured["solve"] - work.solve_bytes / link, 0.1 * measured["solve"])
    reduce = work.driver_reduce / measured["reduce"]
    rates = Rates(
        forward=work.forward / measured["forward"],
        stats=reduce,
        reduce=reduce,
        solve=work.solve / solve_time,
        link=link,
        sum_add=1e30,  # no sums are added as built
        call_latency=0.0,
        wire_bytes=wire_bytes,
        host_link=link,
        lanes=lanes,
        ship_link=work.layer_ship / measured["layer_ship"],
        driver_share=driver_share,
    )
    other = 0.0 if layer_wall is None else max(0.0, layer_wall - sum(measured[k] for k in ITEMS))
    return Fit(rates, other, design)


def predict(shape: Shape, cal: Calibration, workers: int, fit: Fit, design: Design | None = None) -> LayerCost:
    """The model's layer cost on ``workers`` workers at the fitted rates (``design``: default the fitted one)."""
    return layer_cost(shape, cal, workers, design or fit.design, fit.rates)


def as_measured_items(cost: LayerCost) -> dict[str, float]:
    """A predicted cost in the executor's LayerTimes items (transfer: activations, changed parameters, sums and
    call latency; solve: compute plus the jobs' bytes; reduce: the driver's part)."""
    return {
        "forward": cost.forward + cost.worker_stats,
        "reduce": cost.driver_reduce,
        "solve": cost.solve + cost.solve_bytes,
        "transfer": cost.activations + cost.changed_params + cost.sums + cost.calls,
        "layer_ship": cost.layer_ship,
    }
