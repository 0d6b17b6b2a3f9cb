"""EoRA on top of a GPTQ-family processor: after each module's solve, a low-rank adapter of its error.

:class:`EoRAProcessor` wraps a GPTQ / GPTAQ / FOEM processor (anything whose tasks expose ``hessian()``):
before the inner ``process`` it takes each input's covariance (the Hessian ``2/N sum x xᵀ`` the solve
uses) and each module's float weight; afterwards it computes qalgos' :func:`~qalgos.eora.eora_adapter` of
``W - Q`` and installs ``Q + B A`` as the dense weight, so later groups and the layer replay see the
corrected module (the forward a loaded checkpoint computes: ``x Qᵀ + (x Aᵀ) Bᵀ``). Adapters are kept in
:attr:`EoRAProcessor.adapters` (module full name -> ``LowRankAdapter``) and are part of the resume state.
A module that fell back to RTN gets an adapter too (its covariance exists when it saw tokens; none when
it saw no token, recorded in the module's notes).
"""

from __future__ import annotations

from typing import Any

import torch
from qalgos.eora import LowRankAdapter, eora_adapter
from torch.utils.hooks import RemovableHandle

from ..definition import ResolvedGroup
from ..errors import ProcessorError
from .base import LayerContext, ModuleResult, own_copy, replace_weight


class EoRAProcessor:
    """A GPTQ-family processor plus EoRA adapters of ``rank`` (see the module docstring)."""

    def __init__(self, inner: Any, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ProcessorError(f"adapter.rank: expected a positive integer, found {rank!r}")
        if not getattr(inner, "needs_calibration", False) or not hasattr(inner, "_tasks"):
            raise ProcessorError(f"EoRA: needs a calibrated GPTQ-family processor, found {type(inner).__name__}")
        self.inner = inner
        self.rank = rank
        self.method = inner.method
        self.needs_calibration = True
        self.adapters: dict[str, LowRankAdapter] = {}
        if callable(getattr(inner, "observe", None)):
            self.observe = inner.observe

    def start_layer(self, ctx: LayerContext) -> None:
        self.inner.start_layer(ctx)

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        handles: list[RemovableHandle] = self.inner.attach(ctx, group)
        return handles

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        covariances: dict[str, torch.Tensor | None] = {}
        for mod in group.modules:
            if mod.input_key not in covariances:
                task = self.inner._tasks.get(mod.input_key)
                covariances[mod.input_key] = task.hessian() if task is not None and task.nsamples else None
        originals = {mod.full_name: mod.weight.detach().to(torch.float32).clone() for mod in group.modules}
        results: list[ModuleResult] = self.inner.process(ctx, group)
        modules = {mod.full_name: mod for mod in group.modules}
        for row in results:
            mod = modules[row.name]
            cov = covariances[mod.input_key]
            if cov is None or row.result is None:
                row.notes["eora"] = "no adapter: the module saw no calibration token"
                continue
            quantized = row.result.dequantized.to(torch.float32)
            adapter = eora_adapter(originals[row.name] - quantized, cov, self.rank)
            self.adapters[row.name] = adapter
            row.result = own_copy(row.result)  # the weight changes below; the result keeps the quantized values
            replace_weight(mod.module, quantized + adapter.delta())
            row.notes["eora_rank"] = adapter.rank
            if adapter.dropped:
                row.notes["eora_dropped_eigenvalues"] = adapter.dropped
        return results

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        rows: list[ModuleResult] = self.inner.end_layer(ctx)
        return rows

    def describe(self) -> dict[str, Any]:
        return {"inner": self.inner.describe(), "eora_rank": self.rank}

    def state_dict(self) -> dict[str, Any]:
        adapters = {name: {"a": ad.a, "b": ad.b, "dropped": ad.dropped} for name, ad in self.adapters.items()}
        return {"inner": self.inner.state_dict(), "adapters": adapters}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner") or {})
        self.adapters = {
            name: LowRankAdapter(value["a"], value["b"], int(value["dropped"]))
            for name, value in (state.get("adapters") or {}).items()
        }
