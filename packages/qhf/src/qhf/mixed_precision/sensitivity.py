"""The sensitivity pass: how much each unit's width changes its decoder layer's output, one layer at a time.

qlooper's loop runs :class:`SensitivityProcessor` over a few calibration rows; it quantizes nothing, so every layer
sees the dense model's inputs. After a layer's forward, for every unit of the layer (:func:`.units.unit_key`) and
every candidate width ``b``, the unit's weights are replaced by their round-to-nearest values at ``b`` (the run's
group size and symmetry; qalgos' RTN parameters) and the layer is run again on the cached inputs:

    error(unit, b) = sum ||h_b - h||**2 / sum ||h||**2

over the calibration tokens (padding excluded), ``h`` the dense layer's output hidden states, ``h_b`` the output
with the unit at ``b`` bits; then the unit's weights are put back. The layer output is the residual stream the
next layer's norm reads, so the errors of different layers compare and add up, and the measure sees everything
between the unit and the layer's output (attention, the gated MLP, massive activations of a ``down_proj``).
An error per module relative to its own output, or absolute, did not: on SmolLM2 they gave ``down_proj`` modules
3 bits that out-of-domain text needs (docs/algorithms.md).

:class:`TransientLayers` (the loop's layer loader) reads each layer from the source files when the loop starts it
and sends it back to meta when it is done: peak memory is the modules outside the decoder layers, one dense layer
and the subset's activations. Rows: :func:`row_subset` keeps :data:`SENSITIVITY_ROWS` rows at even spacing over
the calibration set. Cost: per layer, one forward for the loop, one for the reference output and one per unit and
candidate width, over those rows.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from qalgos.group_params import gptq_params
from qalgos.rtn import quantize_groups
from qalgos.spec import QuantSpec
from qlooper.calibration import CalibrationSet
from qlooper.capture import to_device
from qlooper.definition import ResolvedGroup, ResolvedModule, resolve_groups
from qlooper.forward import layer_device, layer_output
from qlooper.processors.base import LayerContext, ModuleResult, replace_weight
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..source.opened_source import OpenedSource
from .units import unit_key

#: Calibration rows the sensitivity pass reads at most (evenly spaced over the calibration set): the relative
#: error of a layer's output over 8 x 256 tokens ranks the units, and the pass's forwards stay cheap.
SENSITIVITY_ROWS = 8


class SensitivityProcessor:
    """A qlooper processor that measures (module docstring) and quantizes nothing. ``errors``: the names of a
    unit's modules (a tuple, in the layer's order) -> {width: relative error of the layer's output}."""

    method = "sensitivity"
    needs_calibration = True

    def __init__(self, spec: QuantSpec, candidates: tuple[int, ...]) -> None:
        self.spec = spec
        self.candidates = candidates
        self.errors: dict[tuple[str, ...], dict[int, float]] = {}

    def start_layer(self, ctx: LayerContext) -> None:
        return None

    def observe(self, ctx: LayerContext, group: ResolvedGroup, x: torch.Tensor) -> None:
        """Lockstep: nothing to collect while the layer runs; :meth:`end_layer` measures."""
        return None

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        return []

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        return []

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        if ctx.cache is None:
            raise ValueError(f"sensitivity: layer {ctx.name} has no input cache")
        units: dict[str, list[ResolvedModule]] = {}
        for group in resolve_groups(ctx.layer, ctx.name, ctx.definition):
            for mod in group.modules:
                units.setdefault(unit_key(mod), []).append(mod)
        device = layer_device(ctx.layer)
        calls = [to_device(ctx.cache.call_args(b), device) for b in range(len(ctx.cache))]
        masks = [ctx.cache.token_masks[b].to(device=device, dtype=torch.bool) for b in range(len(ctx.cache))]
        reference = self._outputs(ctx.layer, calls, masks)
        power = sum(float((h.to(torch.float64) ** 2).sum()) for h in reference)
        for members in units.values():
            originals = [mod.weight.detach().clone() for mod in members]
            found: dict[int, float] = {}
            try:
                for bits in self.candidates:
                    spec = replace(self.spec, bits=bits)
                    for mod, weight in zip(members, originals, strict=True):
                        replace_weight(mod.module, quantize_groups(weight.to(torch.float32), spec, gptq_params)[3])
                    changed = self._outputs(ctx.layer, calls, masks)
                    noise = sum(
                        float(((h - r).to(torch.float64) ** 2).sum()) for h, r in zip(changed, reference, strict=True)
                    )
                    found[bits] = noise / power if power > 0 else 0.0
            finally:
                for mod, weight in zip(members, originals, strict=True):
                    replace_weight(mod.module, weight)
            self.errors[tuple(mod.full_name for mod in members)] = found
        return []

    @staticmethod
    def _outputs(layer: nn.Module, calls: list[Any], masks: list[torch.Tensor]) -> list[torch.Tensor]:
        """The layer's output hidden states of every cached call, real tokens only (``[tokens, hidden]``)."""
        with torch.no_grad():
            pairs = zip(calls, masks, strict=True)
            return [layer_output(layer(*args, **kwargs))[mask] for (args, kwargs), mask in pairs]

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
    """The pass's result: ``errors`` (a unit's module names -> {width: error}), the ``rows`` and ``tokens`` it
    read, its wall ``seconds`` and the process CPU seconds (``cpu_seconds``, every thread)."""

    errors: dict[tuple[str, ...], dict[int, float]] = field(default_factory=dict)
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
        lockstep=True,  # one forward of each layer per batch for the loop (expert layers: per-group forwards)
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
