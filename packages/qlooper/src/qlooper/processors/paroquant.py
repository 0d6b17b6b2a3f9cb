"""The ParoQuant processor: every linear of a layer learns its rotation, channel scales and 4-bit weight from
its own inputs (qalgos :func:`~qalgos.paroquant.optimize_paroquant`).

As the reference's module scope: each group's inputs ``[tokens, in]`` (padding excluded) are captured while the
layer still runs in full precision; at the end of the layer every module is optimised against its float outputs
on those inputs, its dense equivalent replaces its weight (the forward replay then feeds the next layer), and it
is packed in the ``paroquant`` layout (:func:`qformats.layouts.paroquant.pack_paroquant`). Each module's pair
schedule is seeded from ``spec.seed``, the layer index and its full name, so runs and resumed runs agree.
A module the fallback policy marks (too few tokens) gets the identity transform and min/max quantization, with
the reason in its report row. Nothing is held between layers: the resume state is empty.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import torch
from qalgos.paroquant import ParoResult, ParoSpec, optimize_paroquant
from qalgos.paroquant_rotation import module_seed
from qformats.layouts.paroquant import pack_paroquant
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup, ResolvedModule
from .base import LayerContext, ModuleResult, first_tensor, replace_weight


def solve_module(
    spec: ParoSpec, weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, seed: int, fallback: str | None
) -> tuple[ParoResult, float]:
    """One module's optimisation (a picklable job for an executor's ``solve_map``); returns (result, seconds)."""
    start = time.perf_counter()
    result = optimize_paroquant(weight, x, spec, bias=bias, seed=seed, fallback=fallback)
    return result, time.perf_counter() - start


class ParoQuantProcessor:
    """ParoQuant per linear (see the module docstring); ``pack`` is the layout's packer."""

    method = "paroquant"
    needs_calibration = True

    def __init__(self, spec: ParoSpec) -> None:
        self.spec = spec
        self.pack = pack_paroquant
        self._x: dict[int, dict[str, list[torch.Tensor]]] = {}
        self._pending: list[tuple[ResolvedModule, torch.Tensor]] = []

    def start_layer(self, ctx: LayerContext) -> None:
        self._pending = []

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        xs: dict[str, list[torch.Tensor]] = {}
        self._x[group.index] = xs
        handles = []
        for mod in group.modules:
            if mod.input_key in xs:
                continue
            store: list[torch.Tensor] = []
            xs[mod.input_key] = store

            def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, store: list[torch.Tensor] = store) -> None:
                store.append(ctx.valid_tokens(first_tensor(inputs).detach()).to(torch.float32).cpu())

            handles.append(mod.module.register_forward_hook(hook))
        return handles

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        """Keep the group's inputs; the modules are solved in :meth:`end_layer` (the layer stays float until then)."""
        chunks = self._x.pop(group.index)
        for mod in group.modules:
            parts = chunks.get(mod.input_key) or []
            in_features = int(mod.weight.shape[1])
            self._pending.append((mod, torch.cat(parts, dim=0) if parts else torch.empty(0, in_features)))
        return []

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        jobs = []
        for mod, x in self._pending:
            bias = getattr(mod.module, "bias", None)
            seed = module_seed(self.spec.seed, ctx.index, mod.full_name)
            fallback = ctx.fallback.get(mod.full_name)
            b = bias.detach() if bias is not None else None
            jobs.append((self.spec, mod.weight.detach(), b, x, seed, fallback))
        run = ctx.solve_map or (lambda fn, items: [fn(*item) for item in items])
        results = []
        for (mod, x), (result, seconds) in zip(self._pending, run(solve_module, jobs), strict=True):
            replace_weight(mod.module, result.dequantized)
            results.append(
                ModuleResult(
                    mod.full_name,
                    ctx.index,
                    self.method,
                    result,
                    int(x.shape[0]),
                    mod.expert,
                    fallback="identity" if result.fallback else None,
                    fallback_reason=result.fallback,
                    seconds=seconds,
                    notes=dict(result.notes),
                )
            )
        self._pending = []
        return results

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        return {"method": self.method, "spec": asdict(self.spec)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
