"""The calibration-free processor: each module's weight is quantized from the weight alone.

With a qalgos ``QuantSpec`` the quantizer defaults to RTN (integer codes, packed by a qformats layout).
With a qalgos ``WeightOnlySpec`` it is ``quantize_weight_only`` (FP8, bitsandbytes NF4/FP4 and int8, GGUF
blocks) and the finished modules are packed by the family's packer from qformats' weight-family registry
(``get_family(spec.family).pack``: ``pack_fp8``, ``pack_bnb4``, ``pack_bnb8``, GGUF ``qweight``). Any
``quantize(weight [out, in], spec)`` returning an object with ``weight``, ``dequantized`` and ``loss`` plugs
in, with ``pack(logical) -> {name: array}`` when the logical weight is not a ``QuantizedWeight``.
``module_specs`` gives named modules their own spec (e.g. the Q6_K modules of a GGUF q4_k_m mixture); it is
part of :meth:`describe`, so a resumed run must use the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qalgos.weight_only import WeightOnlySpec, quantize_weight_only
from qformats.layouts.families import get_family
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup
from .base import LayerContext, ModuleResult, module_specs_description, replace_weight

WeightQuantizer = Callable[[torch.Tensor, Any], Any]
Packer = Callable[[Any], dict[str, np.ndarray]]


class WeightOnlyProcessor:
    """Quantizes every module of a group from its weight; no hooks, no calibration forwards."""

    needs_calibration = False

    def __init__(
        self,
        spec: QuantSpec | WeightOnlySpec,
        quantize: WeightQuantizer | None = None,
        method: str | None = None,
        pack: Packer | None = None,
        module_specs: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        #: Full module name -> the spec it gets instead of ``spec`` (a GGUF mixture's Q6_K modules).
        self.module_specs = dict(module_specs or {})
        if isinstance(spec, WeightOnlySpec):
            self.quantize: WeightQuantizer = quantize or quantize_weight_only
            self.method = method or spec.family
            self.pack: Packer | None = pack or get_family(spec.family).pack
        else:
            self.quantize = quantize or quantize_rtn
            self.method = method or "rtn"
            self.pack = pack

    def start_layer(self, ctx: LayerContext) -> None:
        return None

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        return []

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        results = []
        for mod in group.modules:
            start = time.perf_counter()
            result = self.quantize(mod.weight.detach(), self.module_specs.get(mod.full_name, self.spec))
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
        described = {"method": self.method, "spec": asdict(self.spec), "quantize": fn}
        return {**described, **module_specs_description(self.module_specs)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
