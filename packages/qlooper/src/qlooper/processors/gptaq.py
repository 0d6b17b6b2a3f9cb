"""The GPTAQ / FOEM processor: GPTQ's processor with qalgos' :class:`~qalgos.gptaq.GPTAQ` accumulator.

With ``alpha > 0`` every statistic pairs the quantized-path input with the module's native input
(:mod:`qlooper.native_inputs`, captured at each layer start before anything is quantized); the native
hidden states are this processor's resume state. FOEM with ``alpha = 0`` needs no native input and is
GPTQ's processor with the ``beta`` solve. Solves run in this process even under a sharded executor (the
accumulators carry ``dXXT`` beside the Hessian).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from qalgos.gptaq import GPTAQ, AsymmetricSpec
from qalgos.spec import QuantSpec
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup, ResolvedModule, resolve_groups
from ..native_inputs import NativeInputs
from .base import LayerContext, first_tensor, module_specs_description
from .gptq import GPTQProcessor


class GPTAQProcessor(GPTQProcessor):
    """GPTQ processor whose tasks are GPTAQ accumulators (see the module docstring)."""

    supports_compute_dtype = False  # not measured with a compute dtype: float32 forwards only

    spread_solves = False

    def __init__(
        self, spec: QuantSpec, terms: AsymmetricSpec, module_specs: dict[str, QuantSpec] | None = None
    ) -> None:
        super().__init__(spec, module_specs)
        self.terms = terms
        self.method = terms.method
        self.native = NativeInputs()

    def start_layer(self, ctx: LayerContext) -> None:
        super().start_layer(ctx)
        if self.terms.needs_native and ctx.cache is not None:
            groups = resolve_groups(ctx.layer, ctx.name, ctx.definition)
            self.native.capture_layer(ctx.layer, ctx.cache, groups)

    def _new_task(self, mod: ResolvedModule) -> GPTAQ:
        task = GPTAQ(int(mod.weight.shape[1]), self.spec, self.terms)
        self._tasks[mod.input_key] = task
        return task

    def _add(self, ctx: LayerContext, key: str, task: Any, x: torch.Tensor) -> None:
        mask = ctx.mask_for(x)
        if self.terms.needs_native:
            task.add_pair(x.detach(), self.native.take(key, ctx.batch, x), mask)
        else:
            task.add_batch(x.detach(), mask)

    def observe(self, ctx: LayerContext, group: ResolvedGroup, x: torch.Tensor) -> None:
        mod = group.modules[0]
        task = self._tasks.get(mod.input_key) or self._new_task(mod)
        self._add(ctx, mod.input_key, task, x)

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        handles = []
        for mod in group.modules:
            if mod.input_key in self._tasks:
                continue
            task = self._new_task(mod)

            def hook(
                _m: nn.Module, inputs: tuple[Any, ...], _out: Any, task: Any = task, key: str = mod.input_key
            ) -> None:
                self._add(ctx, key, task, first_tensor(inputs))

            handles.append(mod.module.register_forward_hook(hook))
        return handles

    def end_layer(self, ctx: LayerContext) -> list[Any]:
        self.native.end_layer()
        return super().end_layer(ctx)

    def describe(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "spec": asdict(self.spec),
            "terms": asdict(self.terms),
            **module_specs_description(self.module_specs),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"native": self.native.state_dict()} if self.terms.needs_native else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.terms.needs_native:
            self.native.load_state_dict(state.get("native") or {})
