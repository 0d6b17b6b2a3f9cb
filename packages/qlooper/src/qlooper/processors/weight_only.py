"""The calibration-free processor: each module's weight is quantized from the weight alone.

``quantize(weight [out, in], spec) -> QuantResult`` defaults to qalgos' RTN; any weight-only
quantizer with that signature (FP8, NF4, GGUF families as qalgos provides them) plugs in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup
from .base import LayerContext, ModuleResult, replace_weight

WeightQuantizer = Callable[[torch.Tensor, QuantSpec], Any]


class WeightOnlyProcessor:
    """Quantizes every module of a group from its weight; no hooks, no calibration forwards."""

    needs_calibration = False

    def __init__(self, spec: QuantSpec, quantize: WeightQuantizer | None = None, method: str = "rtn") -> None:
        self.spec = spec
        self.quantize = quantize or quantize_rtn
        self.method = method

    def start_layer(self, ctx: LayerContext) -> None:
        return None

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        return []

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        results = []
        for mod in group.modules:
            start = time.perf_counter()
            result = self.quantize(mod.weight.detach(), self.spec)
            replace_weight(mod.module, result.dequantized)
            results.append(
                ModuleResult(
                    mod.full_name, ctx.index, self.method, result, 0, mod.expert, seconds=time.perf_counter() - start
                )
            )
        return results

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        return []

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        fn = f"{self.quantize.__module__}.{self.quantize.__qualname__}"
        return {"method": self.method, "spec": asdict(self.spec), "quantize": fn}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
