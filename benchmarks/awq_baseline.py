"""The AWQ scale search as it was before the speed work (lowbit at a48762f), kept only for
``bench_qlooper_awq.py`` to time side by side: ``search_scales`` converting the reference to float64 on
every grid ratio and fake-quantizing group by group, and the processor's replay cloning the group's
weights on every call. Not part of any package; do not import it elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from qalgos.awq import ForwardWith, ScaleSearchResult, _check_awq_spec, weight_importance
from qalgos.errors import NumericalError
from qalgos.group_params import awq_params
from qalgos.rtn import quantize_groups
from qalgos.spec import QuantSpec
from qlooper.definition import ResolvedGroup


def fake_quantize_awq(weight: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    return quantize_groups(weight.to(torch.float32), spec, awq_params)[3]


def _output_mse(reference: torch.Tensor, output: torch.Tensor) -> float:
    return float((reference.to(torch.float64) - output.to(torch.float64)).square().mean())


def search_scales(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    forward_with: ForwardWith,
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
    reference: torch.Tensor | None = None,
) -> ScaleSearchResult:
    _check_awq_spec(spec)
    in_ = weights[0].shape[-1]
    x_mean = x.detach().reshape(-1, in_).to(torch.float32).abs().mean(dim=0)
    w_mean = weight_importance(weights, spec)
    if reference is None:
        reference = forward_with(list(weights))
    best: tuple[float, float, torch.Tensor] | None = None
    for i in range(grid):
        ratio = i / grid
        scales = x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4) if duo_scaling else x_mean.pow(ratio)
        scales = scales.clamp(min=1e-4)
        scales = scales / (scales.max() * scales.min()).sqrt()
        scales = torch.where(torch.isfinite(scales), scales, torch.ones_like(scales))
        trial = [(fake_quantize_awq(wj.to(torch.float32) * scales, spec) / scales).to(wj.dtype) for wj in weights]
        loss = _output_mse(reference, forward_with(trial))
        if loss == loss and (best is None or loss < best[0]):
            best = (loss, ratio, scales)
    if best is None:
        raise NumericalError(f"AWQ scale search: every one of the {grid} ratios gave a NaN output loss")
    return ScaleSearchResult(best[2], best[1], best[0])


def forward_with(self: Any, group: ResolvedGroup, x: torch.Tensor):  # the old AWQProcessor._forward_with
    def output_tensor(out: Any) -> torch.Tensor:
        return out[0] if isinstance(out, (tuple, list)) else out

    def run(weights: list[torch.Tensor]) -> torch.Tensor:
        if group.inspect is None:
            outs = []
            for mod, w in zip(group.modules, weights, strict=False):
                bias = getattr(mod.module, "bias", None)
                y = x @ w.to(torch.float32).T
                outs.append(y + bias.to(torch.float32) if bias is not None else y)
            return torch.cat(outs, dim=-1)
        saved = [mod.weight.detach().clone() for mod in group.modules]
        try:
            with torch.no_grad():
                for mod, w in zip(group.modules, weights, strict=False):
                    mod.weight.copy_(w.to(mod.weight.dtype))
                calls = self._inspect_calls[group.index]
                outs = [output_tensor(group.inspect(*a, **kw)) for a, kw in calls]
        finally:
            with torch.no_grad():
                for mod, w in zip(group.modules, saved, strict=False):
                    mod.weight.copy_(w)
        return torch.cat([o.reshape(-1, o.shape[-1]).to(torch.float32) for o in outs], dim=0)

    return run
