"""The GPTQ processor: Hessian statistics from hooks, one solve per module, reconstructed weights replayed.

Modules of a group that share an input (same ``input_key``) accumulate one Hessian; each module's solve
works on its own float32 copy of it, so a solve never sees another's changes, and the last module
reading that input frees the float64 sum. A module the loop marked for fallback is quantized with RTN and recorded.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import torch
from qalgos.fallback import fall_back
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup, ResolvedModule
from .base import LayerContext, ModuleResult, first_tensor, replace_weight


class GPTQProcessor:
    """GPTQ over calculation groups (see the module docstring)."""

    method = "gptq"
    needs_calibration = True

    def __init__(self, spec: QuantSpec) -> None:
        self.spec = spec
        self._tasks: dict[str, GPTQ] = {}

    def start_layer(self, ctx: LayerContext) -> None:
        self._tasks = {}

    def _new_task(self, mod: ResolvedModule) -> GPTQ:
        task = GPTQ(int(mod.weight.shape[1]), self.spec)
        self._tasks[mod.input_key] = task
        return task

    def observe(self, ctx: LayerContext, group: ResolvedGroup, x: torch.Tensor) -> None:
        """Lockstep statistics: ``x`` ``[B, T, in]`` is the input every module of ``group`` reads (batch
        ``ctx.batch``, mask ``ctx.mask``)."""
        mod = group.modules[0]
        task = self._tasks.get(mod.input_key) or self._new_task(mod)
        task.add_batch(x.detach(), ctx.mask_for(x))

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        handles = []
        for mod in group.modules:
            if mod.input_key in self._tasks:
                continue
            task = self._new_task(mod)

            def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, task: GPTQ = task) -> None:
                x = first_tensor(inputs)
                task.add_batch(x.detach(), ctx.mask_for(x))

            handles.append(mod.module.register_forward_hook(hook))
        return handles

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        results = []
        remaining: dict[str, int] = {}
        for mod in group.modules:
            remaining[mod.input_key] = remaining.get(mod.input_key, 0) + 1
        for mod in group.modules:
            start = time.perf_counter()
            remaining[mod.input_key] -= 1
            task = self._tasks[mod.input_key]
            tokens = int(task.nsamples)
            reason = ctx.fallback.get(mod.full_name)
            weight = mod.weight.detach()
            if reason is not None:
                result = fall_back(weight, self.spec, reason, tokens)
            else:
                # a solve reads a float32 copy of the shared sum; the last reader frees the sum
                result = task.quantize(weight, release_statistics=remaining[mod.input_key] == 0)
            replace_weight(mod.module, result.dequantized)
            results.append(
                ModuleResult(
                    mod.full_name,
                    ctx.index,
                    self.method,
                    result,
                    tokens,
                    mod.expert,
                    fallback="rtn" if result.fallback else None,
                    fallback_reason=result.fallback,
                    seconds=time.perf_counter() - start,
                )
            )
        for key, count in remaining.items():
            if count == 0:
                self._tasks.pop(key, None)
        return results

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        self._tasks = {}
        return []

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        return {"method": self.method, "spec": asdict(self.spec)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
