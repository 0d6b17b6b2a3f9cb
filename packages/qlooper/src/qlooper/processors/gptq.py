"""The GPTQ processor: Hessian statistics from hooks, one solve per module, reconstructed weights replayed.

Modules of a group that share an input (same ``input_key``) accumulate one Hessian; each module's solve
works on its own float32 copy of it, so a solve never sees another's changes, and the last module
reading that input frees the float64 sum. A module the loop marked for fallback is quantized with RTN and recorded.

``module_specs`` gives named modules their own spec (a ``dynamic`` rule's ``bits`` / ``group_size``, e.g. a mixed
precision run's widths): such a module is solved from its input's statistics under its own spec
(qalgos' ``GPTQ.with_spec``: one accumulator per input whatever the specs); it is part of :meth:`describe`,
so a resumed run must use the same.

Under a sharded executor (``ctx.solve_map`` set) every module is one job, :func:`solve_module`: the driver forms
each input's float32 Hessian once (the float32 copy every inline solve of that input reads) and sends it with
each module's weight, so q, k and v (gate and up) solve at once on different workers, bit for bit as inline.
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
from ..worker_statistics import HessianRowsHook
from .base import LayerContext, ModuleResult, first_tensor, install_result, module_specs_description


class GPTQProcessor:
    """GPTQ over calculation groups (see the module docstring)."""

    method = "gptq"
    needs_calibration = True
    #: whether ``ctx.solve_map`` (a sharded executor) may run the solves (a subclass with extra per-module
    #: state solves inline)
    spread_solves = True
    #: whether ``LoopOptions.compute_dtype`` may run the layer forwards in bfloat16 / float16 (the Hessian is
    #: accumulated in float32 from whatever dtype the activations have; solves read the float32 masters)
    supports_compute_dtype = True
    #: whether a sharded executor may solve a MoE layer's experts on their owning workers with this processor's
    #: own ``attach``/``process`` (:mod:`qlooper.expert_shards`; needs ``spread_solves`` too)
    shard_experts = True

    def __init__(self, spec: QuantSpec, module_specs: dict[str, QuantSpec] | None = None) -> None:
        self.spec = spec
        #: Full module name -> the spec it gets instead of ``spec`` (module docstring).
        self.module_specs = dict(module_specs or {})
        self._tasks: dict[str, GPTQ] = {}

    def spec_for(self, mod: ResolvedModule) -> QuantSpec:
        """The spec ``mod`` is quantized with: its own (``module_specs``) or the run's."""
        return self.module_specs.get(mod.full_name, self.spec)

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
            if mod.expert is None:  # a dense input: a sharded executor may form its segments on the workers
                handles.append(mod.module.register_forward_hook(HessianRowsHook(ctx, task)))
                continue

            def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, task: GPTQ = task) -> None:
                x = first_tensor(inputs)
                task.add_batch(x.detach(), ctx.mask_for(x))

            handles.append(mod.module.register_forward_hook(hook))
        return handles

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        if ctx.solve_map is not None and self.spread_solves:
            return self._process_spread(ctx, group)
        results = []
        remaining: dict[str, int] = {}
        for mod in group.modules:
            remaining[mod.input_key] = remaining.get(mod.input_key, 0) + 1
        for mod in group.modules:
            start = time.perf_counter()
            remaining[mod.input_key] -= 1
            task = self._tasks[mod.input_key].with_spec(self.spec_for(mod))
            tokens = int(task.nsamples)
            reason = ctx.fallback.get(mod.full_name)
            weight = mod.weight.detach()
            if reason is not None:
                result = self._fall_back(weight, reason, tokens, self.spec_for(mod))
            else:
                # a solve reads a float32 copy of the shared sum; the last reader frees the sum
                result = task.quantize(weight, release_statistics=remaining[mod.input_key] == 0)
            results.append(self._finished(ctx, mod, result, tokens, time.perf_counter() - start))
        for key, count in remaining.items():
            if count == 0:
                self._tasks.pop(key, None)
        return results

    def solve_from(self, ctx: LayerContext, group: ResolvedGroup, statistics: dict[str, GPTQ]) -> list[ModuleResult]:
        """:meth:`process` from statistics a caller accumulated itself (input key -> accumulator; qlooper's
        ``awq_gptq``: the Hessians of AWQ-scaled inputs) instead of this processor's hooks."""
        self._tasks.update(statistics)
        return self.process(ctx, group)

    def _fall_back(self, weight: torch.Tensor, reason: str, tokens: int, spec: QuantSpec | None = None) -> Any:
        """The result of a module the loop marked for fallback (RTN at ``spec``, default the run's; the reason
        recorded)."""
        return fall_back(weight, spec or self.spec, reason, tokens)

    def _finished(
        self, ctx: LayerContext, mod: ResolvedModule, result: Any, tokens: int, seconds: float
    ) -> ModuleResult:
        """Install ``result``'s dequantized weight in the module and report it (both solve paths); the result then
        holds the module's weight as its dequantized weight, not a copy of it (:func:`~.base.install_result`)."""
        result = install_result(mod.module, result)
        return ModuleResult(
            mod.full_name,
            ctx.index,
            self.method,
            result,
            tokens,
            mod.expert,
            fallback="rtn" if result.fallback else None,
            fallback_reason=result.fallback,
            seconds=seconds,
        )

    def _process_spread(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        """One :func:`solve_module` job per non-fallback module (group order), run by ``ctx.solve_map``, so
        the modules reading one input (q/k/v, gate/up) solve at once on different workers. Each input's float32
        Hessian is formed here once (its float64 sum freed as it forms) and the same tensor goes with each of
        its modules' jobs: it is the value every inline solve of that input reads, so the bits are the same.
        Fallback modules are solved here."""
        if ctx.solve_map is None:
            raise ValueError("_process_spread: the context has no solve_map")
        solving = [mod for mod in group.modules if ctx.fallback.get(mod.full_name) is None]
        hessians: dict[str, tuple[torch.Tensor, int]] = {}
        for mod in solving:
            if mod.input_key not in hessians:
                task = self._tasks[mod.input_key]
                hessians[mod.input_key] = (task.hessian(release=True), int(task.nsamples))
        jobs = [(self.spec_for(mod), *hessians[mod.input_key], mod.weight.detach()) for mod in solving]
        solved = dict(zip((mod.full_name for mod in solving), ctx.solve_map(solve_module, jobs), strict=True))
        hessians.clear()
        results = []
        for mod in group.modules:
            start = time.perf_counter()
            tokens = int(self._tasks[mod.input_key].nsamples)
            reason = ctx.fallback.get(mod.full_name)
            if reason is not None:
                result, seconds = self._fall_back(mod.weight.detach(), reason, tokens, self.spec_for(mod)), 0.0
            else:
                result, seconds = solved[mod.full_name]
            results.append(self._finished(ctx, mod, result, tokens, seconds + time.perf_counter() - start))
        for mod in group.modules:
            self._tasks.pop(mod.input_key, None)
        return results

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        self._tasks = {}
        return []

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        return {"method": self.method, "spec": asdict(self.spec), **module_specs_description(self.module_specs)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def solve_module(spec: QuantSpec, hessian: torch.Tensor, nsamples: int, weight: torch.Tensor) -> tuple[Any, float]:
    """The GPTQ solve of one module (a sharded executor's job): ``hessian`` float32 ``[in, in]`` is its input's
    Hessian as the accumulator formed it (``GPTQ.hessian``; not changed here), ``nsamples`` its token count,
    ``weight`` ``[out, in]``, ``spec`` the module's spec. The same bits as the inline solve (qalgos'
    ``GPTQ.from_hessian``). Returns (``QuantResult``, wall seconds)."""
    start = time.perf_counter()
    result = GPTQ.from_hessian(hessian, nsamples, spec).quantize(weight, release_statistics=True)
    return result, time.perf_counter() - start
