"""GPTQ on AWQ-scaled weights: AWQ's per-group scale search and fold, then a GPTQ solve of each scaled module.

Per group (in ``process``, as the GPTQ processor solves): the group's inputs ``x [tokens, in]`` are captured
(padding excluded), AWQ's scale search and fold run exactly as in :class:`~qlooper.processors.awq.AWQProcessor`
(same search, token budget and Gram form; the search fake-quantizes with the run's spec without its column
ordering, which AWQ's formulas do not have), and every module of the group is then solved by qalgos' GPTQ on
its scaled weight ``W · diag(s)`` with the Hessian of its scaled inputs ``x / s`` (``2/N · Σ (x/s)(x/s)ᵀ``,
i.e. ``diag(1/s) H diag(1/s)``): damping, act-order or group-aware order and the MSE range search come from
the spec, as for GPTQ. A group AWQ cannot scale (AWQ's rules: no ``prev_op``, a width mismatch, modules
reading different inputs, an inspect module never called) is solved by plain GPTQ on its captured inputs; its
rows say why (``scale_search=skipped: ...``, ``solver=gptq (unscaled)``). The solved weights replace the dense
ones at once, so with ``true_sequential`` (the default) the next group's capture forward, its scale search and
its Hessian see the earlier groups quantized, as GPTQ's do (AWQ instead quantizes the whole layer at its end,
every group having seen full-precision earlier groups).

That order meets one case AWQ's does not: a group whose ``prev_op`` is a linear solved earlier in the layer
(``o_proj`` after ``v_proj``, ``down_proj`` after ``up_proj``). Its scales are then folded into that module's
stored form (:func:`qalgos.awq.fold_scales_into_quantized`: the module's output-row scales divided, codes kept;
GPTQ picks the same codes for a positively scaled row, so this equals solving after the fold, up to float
rounding), and the rows of every layer are reported at ``end_layer``, once no later group can change them.
Fallback modules (the loop's policy) are quantized with RTN on their scaled weight and recorded.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

import torch
from qalgos.awq import fold_scales_into_quantized
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec

from ..definition import ResolvedGroup
from .awq import DEFAULT_SEARCH_TOKENS, AWQProcessor
from .base import LayerContext, ModuleResult, module_specs_description, replace_weight
from .gptq import GPTQProcessor

HESSIAN_ROWS = 4096
"""Captured rows scaled and added to a Hessian at a time (bounds the scaled copy; the sum does not depend on it)."""


class AWQGPTQProcessor(AWQProcessor):
    """AWQ scale search and fold, then GPTQ solves of the scaled weights (see the module docstring).

    ``module_specs``: named modules' own specs (solved at their width, as GPTQ's); ``search_tokens`` and
    ``gram_loss`` are the AWQ processor's scale-search options (same defaults). Solves
    run inline or, under a sharded executor (``ctx.solve_map``), as GPTQ's
    :func:`~qlooper.processors.gptq.solve_module` jobs (one per module). Forwards run in the model's dtype only (no
    ``compute_dtype``), as for AWQ.
    """

    method = "awq_gptq"
    needs_calibration = True

    def __init__(
        self,
        spec: QuantSpec,
        module_specs: dict[str, QuantSpec] | None = None,
        *,
        search_tokens: int | None = DEFAULT_SEARCH_TOKENS,
        gram_loss: bool = True,
    ) -> None:
        super().__init__(spec, clip=False, search_tokens=search_tokens, gram_loss=gram_loss)
        self.search_spec = replace(spec, desc_act=False, act_group_aware=False)
        self._solver = GPTQProcessor(spec, module_specs)  # modules' own widths (dynamic rules)
        self._rows: dict[str, ModuleResult] = {}  # this layer's solved modules, in solve order
        self._owners: dict[int, str] = {}  # id(module) -> full name, for this layer's solved modules

    def start_layer(self, ctx: LayerContext) -> None:
        super().start_layer(ctx)
        self._solver.start_layer(ctx)
        self._rows, self._owners = {}, {}

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        xs, scales, notes, spent = self.search_and_fold(ctx, group)
        if scales is not None:
            self._fold_into_solved(group, scales)
        start = time.perf_counter()
        tasks: dict[str, GPTQ] = {}
        for mod in group.modules:
            if mod.input_key not in tasks:
                tasks[mod.input_key] = self._hessian(int(mod.weight.shape[1]), xs[mod.input_key], scales)
        spent += (time.perf_counter() - start) / len(group.modules)
        solved = {row.name: row for row in self._solver.solve_from(ctx, group, tasks)}
        notes = {**notes, "solver": "gptq" if scales is not None else "gptq (unscaled)"}
        for mod in group.modules:
            row = solved[mod.full_name]
            row.method, row.seconds, row.notes = self.method, row.seconds + spent, {**notes, **row.notes}
            self._rows[row.name] = row
            self._owners[id(mod.module)] = row.name
        return []

    def _hessian(self, in_features: int, x: torch.Tensor | None, scales: torch.Tensor | None) -> GPTQ:
        """A GPTQ accumulator over the captured ``x [tokens, in]`` divided by ``scales`` (when the group was
        scaled): the inputs the scaled weights see."""
        task = GPTQ(in_features, self.spec)
        if x is not None:
            for part in torch.split(x, HESSIAN_ROWS):
                task.add_batch(part / scales if scales is not None else part)
        return task

    def _fold_into_solved(self, group: ResolvedGroup, scales: torch.Tensor) -> None:
        """When the group's ``prev_op`` is a linear solved earlier in this layer, divide its stored output rows
        by ``scales`` and install the result (the fold already divided its dense weight the same way)."""
        name = self._owners.get(id(group.prev_op))
        row = self._rows.get(name) if name is not None else None
        if row is None or row.result is None or group.prev_op is None:
            return
        row.result = fold_scales_into_quantized(row.result, scales)
        replace_weight(group.prev_op, row.result.dequantized)
        row.notes["rows_scaled_for"] = "+".join(mod.name for mod in group.modules)

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        """The layer's rows, in solve order (every module was solved in ``process``)."""
        rows = list(self._rows.values())
        self._rows, self._owners, self._pending = {}, {}, []
        self._solver.end_layer(ctx)
        return rows

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        return {
            "method": self.method,
            "spec": asdict(self.spec),
            "search_tokens": self.search_tokens,
            "gram_loss": self.gram_loss,
            **module_specs_description(self._solver.module_specs),
        }
