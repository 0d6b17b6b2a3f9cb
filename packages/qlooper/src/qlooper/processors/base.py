"""The processor protocol and the per-layer context processors work in.

A processor owns one algorithm's statistics and solve. The loop calls, per layer:
``start_layer`` → per group (``attach`` hooks → capture forwards → ``process``) → ``end_layer``.
Every call returns :class:`ModuleResult` s when modules are solved; the loop packs them later in
finalizers. The loop never branches on the processor's class: it reads ``needs_calibration``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..definition import ModelDefinition, ResolvedGroup
from ..input_cache import InputCache
from ..module_access import module_tensor


@dataclass
class ModuleResult:
    """One solved module. ``result`` is qalgos' ``QuantResult`` (``None`` when left unquantized).

    ``tokens`` counts calibration tokens the module saw; ``fallback`` names the strategy used instead
    of the processor's algorithm and ``fallback_reason`` says why; ``seconds`` is solve wall time.
    """

    name: str
    layer: int
    method: str
    result: Any
    tokens: int = 0
    expert: int | None = None
    fallback: str | None = None
    fallback_reason: str | None = None
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class LayerContext:
    """State of the layer being processed, shared by the loop, the hooks and the processor.

    ``mask`` is the token mask ``[B, T]`` bool of the batch being forwarded (None outside forwards);
    ``tokens`` counts tokens seen per module full name; ``fallback`` maps a module full name to the
    reason it must fall back (set by the loop's policy before ``process``). ``solve_map``: the executor's
    ``(fn, jobs) -> [fn(*job) ...]`` for independent module solves (None: solve inline in this process).
    """

    index: int
    name: str
    layer: nn.Module
    definition: ModelDefinition
    cache: InputCache | None
    total_tokens: int
    mask: torch.Tensor | None = None
    batch: int = -1
    tokens: dict[str, int] = field(default_factory=dict)
    fallback: dict[str, str] = field(default_factory=dict)
    solve_map: Callable[[Callable[..., Any], Sequence[tuple[Any, ...]]], list[Any]] | None = None

    def mask_for(self, x: torch.Tensor) -> torch.Tensor | None:
        """The current token mask when ``x`` is ``[B, T, features]`` of this batch, else None (routed tokens)."""
        return matching_mask(self.mask, x)

    def valid_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` flattened to ``[tokens, features]`` with padding positions removed."""
        mask = self.mask_for(x)
        if mask is not None:
            return x[mask]
        return x.reshape(-1, x.shape[-1])


class Processor(Protocol):
    """What the loop needs from a processor (GPTQ, AWQ, weight-only, or a user's own)."""

    method: str
    needs_calibration: bool

    def start_layer(self, ctx: LayerContext) -> None: ...

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        """Register the hooks that feed statistics for ``group``; the loop removes them after the forwards."""
        ...

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]: ...

    # Optional: ``observe`` (see :class:`ObservingProcessor`).

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]: ...

    def describe(self) -> dict[str, Any]:
        """A JSON-able description of the processor's numerics (method, spec, options)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ObservingProcessor(Processor, Protocol):
    """A processor that can run in lockstep (:mod:`qlooper.lockstep`): one forward per layer instead of one
    capture forward per group plus a replay."""

    def observe(self, ctx: LayerContext, group: ResolvedGroup, x: torch.Tensor) -> None:
        """Take the input ``x`` ``[B, T, in]`` that every module of ``group`` reads, for batch ``ctx.batch``."""
        ...


def module_specs_description(module_specs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"module_specs": {name: spec fields}}`` (names sorted) for a processor's :meth:`~Processor.describe`
    when some modules have their own spec, else ``{}`` (so a run without them describes itself as before)."""
    if not module_specs:
        return {}
    return {"module_specs": {name: asdict(spec) for name, spec in sorted(module_specs.items())}}


def matching_mask(mask: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """``mask`` ``[B, T]`` (on ``x``'s device) when ``x`` is ``[B, T, features]`` of that batch, else None (the
    rows of ``x`` are not the batch's tokens one for one: routed or flattened; all of them count)."""
    if mask is not None and x.dim() == mask.dim() + 1 and tuple(x.shape[:-1]) == tuple(mask.shape):
        return mask.to(x.device)
    return None


def tokens_in(mask: torch.Tensor | None, x: torch.Tensor) -> int:
    """Calibration tokens in activations ``x`` ``[..., in]`` of a batch with token ``mask``: the mask's count
    when it matches ``x`` (:func:`matching_mask`), else every row (padding included)."""
    matched = matching_mask(mask, x)
    return int(matched.sum()) if matched is not None else x.numel() // max(x.shape[-1], 1)


def first_tensor(inputs: tuple[Any, ...]) -> torch.Tensor:
    """The first positional input of a hooked call (the activation ``[..., in]``)."""
    x = inputs[0]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"hooked module input: expected a tensor, found {type(x).__name__}")
    return x


def replace_weight(module: nn.Module, dequantized: torch.Tensor) -> None:
    """Write the reconstructed weight into the dense module (same dtype/device) so later forwards see it."""
    weight = module_tensor(module, "weight")
    with torch.no_grad():
        weight.copy_(dequantized.to(dtype=weight.dtype, device=weight.device))


def install_result(module: nn.Module, result: Any) -> Any:
    """Write ``result.dequantized`` ``[out, in]`` into ``module``'s weight (:func:`replace_weight`) and return
    ``result`` holding that weight itself as its ``dequantized`` when the weight now equals it exactly (same
    dtype, device and shape, so the copy was exact, and the weight owns its whole storage): a solved module
    keeps one ``[out, in]`` tensor instead of two while the layer's results wait for their finalizers (a
    Llama-3-8B layer: 436 MB of bfloat16; a 128-expert MoE layer's 384 expert weights: 1.2 GB). Otherwise
    ``result`` is returned as it was.

    The values are the same either way; what changes is that a later in-place change of the module's weight
    also changes the result's ``dequantized``: a processor that changes a solved module's weight afterwards
    calls :func:`own_copy` first (EoRA adds its adapter's product to the weight)."""
    replace_weight(module, result.dequantized)
    weight = module_tensor(module, "weight")
    source = result.dequantized
    if (weight.dtype, weight.device, weight.shape) != (source.dtype, source.device, source.shape):
        return result
    if weight.storage_offset() != 0 or weight.untyped_storage().nbytes() != weight.numel() * weight.element_size():
        return result  # a view of a larger tensor (a fused expert's slice): pickling it would carry the whole
    return replace(result, dequantized=weight.detach())


def own_copy(result: Any) -> Any:
    """``result`` with a ``dequantized`` of its own (a clone; see :func:`install_result`)."""
    return replace(result, dequantized=result.dequantized.clone())
