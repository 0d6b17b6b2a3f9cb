"""The sensitivity pass: one dense forward over a subset of the calibration rows, one decoder layer at a time.

qlooper's loop runs :class:`SensitivityProcessor`, which quantizes nothing: for every module it accumulates its
input's mean square per column ``p_j = E[x_j**2]`` (float64, padding excluded; modules reading one input share
it) and then computes, for every candidate width ``b``, the module's RTN noise-to-signal ratio
``sum_j p_j |W_:j - RTN_b(W)_:j|**2 / sum_j p_j |W_:j|**2`` (:func:`qalgos.sensitivity.rtn_noise_to_signal`, the
run's group size and symmetry). Nothing changes the layer, so every layer sees the dense model's inputs; the loop
runs it in lockstep (one forward of the layer per batch, paused before each group).

:class:`TransientLayers` (the loop's layer loader) reads each layer from the source files when the loop starts it
and sends it back to meta when it is done: peak memory is the modules outside the decoder layers, one dense layer
and the subset's activations. Rows: :func:`row_subset` keeps :data:`SENSITIVITY_ROWS` rows at even spacing over
the calibration set (a diagonal statistic needs few tokens).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from qalgos.sensitivity import rtn_noise_to_signal
from qalgos.spec import QuantSpec
from qlooper.calibration import CalibrationSet
from qlooper.definition import ResolvedGroup
from qlooper.processors.base import LayerContext, ModuleResult
from torch import nn

from ..input_hooks import HookedInputs
from ..source.opened_source import OpenedSource

#: Calibration rows the sensitivity pass reads at most (evenly spaced over the calibration set): 16 x 256 tokens
#: estimate a diagonal input power well, and the pass's forwards stay a fraction of a GPTQ run's.
SENSITIVITY_ROWS = 16


class SensitivityProcessor(HookedInputs):
    """A qlooper processor that measures (module docstring) and quantizes nothing. ``errors``: module full name
    -> {width: noise-to-signal ratio}, filled layer by layer."""

    method = "sensitivity"
    needs_calibration = True

    def __init__(self, spec: QuantSpec, candidates: tuple[int, ...]) -> None:
        self.spec = spec
        self.candidates = candidates
        self.errors: dict[str, dict[int, float]] = {}
        self._power: dict[str, torch.Tensor] = {}  # input key -> sum of x**2 per column, float64 [in]
        self._tokens: dict[str, int] = {}

    def start_layer(self, ctx: LayerContext) -> None:
        self._power, self._tokens = {}, {}

    def _add(self, ctx: LayerContext, key: str, x: torch.Tensor) -> None:
        rows = ctx.valid_tokens(x.detach())
        if key not in self._power:
            self._power[key] = torch.zeros(int(rows.shape[-1]), dtype=torch.float64)
            self._tokens[key] = 0
        self._power[key] += (rows.to(torch.float64) ** 2).sum(dim=0).cpu()
        self._tokens[key] += int(rows.shape[0])

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        for mod in group.modules:
            tokens = self._tokens.get(mod.input_key, 0)  # an expert no token reached: power 0, ratio 0
            power = self._power.get(mod.input_key, torch.zeros(int(mod.weight.shape[1]), dtype=torch.float64))
            weight = mod.weight.detach()
            self.errors[mod.full_name] = {
                bits: rtn_noise_to_signal(weight, power / max(tokens, 1), replace(self.spec, bits=bits))
                for bits in self.candidates
            }
        return []

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        return []

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "spec": asdict(self.spec), "candidates": list(self.candidates)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


@dataclass
class TransientLayers:
    """The loop's layer loader for the pass: ``load`` reads the layer from the source files, ``release`` sends it
    back to meta (the modules outside the decoder layers stay as they are)."""

    source: OpenedSource

    def load(self, index: int, name: str, layer: nn.Module) -> None:
        self.source.materialize_layer(index)

    def release(self, index: int, name: str, layer: nn.Module) -> None:
        self.source.release_layer(index)


def row_subset(calibration: CalibrationSet, rows: int = SENSITIVITY_ROWS) -> CalibrationSet:
    """``calibration`` itself when it holds at most ``rows`` rows, else evenly spaced whole batches holding about
    ``rows`` rows (at least one batch)."""
    if calibration.rows <= rows:
        return calibration
    count = len(calibration.batches)
    per_batch = calibration.rows / count
    keep = max(1, min(count, math.ceil(rows / per_batch)))
    batches = [calibration.batches[i * count // keep] for i in range(keep)]
    return CalibrationSet(batches, sum(int(b.input_ids.shape[0]) for b in batches))


@dataclass
class Sensitivity:
    """The pass's result: ``errors`` (module -> {width: error}), the ``rows`` and ``tokens`` it read, its wall
    ``seconds`` and the process CPU seconds (``cpu_seconds``, every thread)."""

    errors: dict[str, dict[int, float]] = field(default_factory=dict)
    rows: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def measure_sensitivity(
    source: OpenedSource,
    calibration: CalibrationSet,
    spec: QuantSpec,
    candidates: tuple[int, ...],
    *,
    format: str,
    device: Any = None,
    cache_device: str = "cpu",
) -> Sensitivity:
    """Run the pass (module docstring) over ``source``'s decoder layers; the modules outside them must be
    materialized (the loop captures the first layer's inputs through them)."""
    from qlooper.api import quantize_model
    from qlooper.loop import LoopOptions

    start, cpu = time.perf_counter(), time.process_time()
    subset = row_subset(calibration)
    processor = SensitivityProcessor(spec, candidates)
    options = LoopOptions(
        lockstep=True,  # one forward of each layer per batch (expert layers: per-group forwards)
        lockstep_budget=None,  # the subset's parked activations are small
        layer_loader=TransientLayers(source),
        device=device,
        cache_device=cache_device,
    )
    quantize_model(source.model, source.definition, subset, None, processor, format=format, options=options)
    return Sensitivity(
        processor.errors,
        subset.rows,
        subset.total_tokens,
        round(time.perf_counter() - start, 3),
        round(time.process_time() - cpu, 3),
    )
