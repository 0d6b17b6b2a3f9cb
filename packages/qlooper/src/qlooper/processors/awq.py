"""The AWQ processor: per-group scale search folded into the previous op, then clip search and quantization.

Per group (during the layer): inputs ``x [tokens, in]`` of the group are captured (padding excluded);
when the group has one shared input and a ``prev_op`` whose output width equals ``in``, scales are
searched against the output of the ``inspect`` module (or the group's own outputs), divided into the
previous op's weight and bias, and multiplied into the group's input columns; the mathematically
equivalent model keeps running in full precision. At the end of the layer every module gets a clip
search (except names in ``ModelDefinition.awq_no_clip``) on its scaled input ``x / s`` and is
quantized with the AWQ formulas; the reconstructed weights then feed the layer's forward replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from qalgos import awq
from qalgos.awq_clip import search_clip
from qalgos.awq_gram import search_scales_gram
from qalgos.fallback import fall_back
from qalgos.scratch_buffers import ScratchBuffers
from qalgos.spec import QuantSpec
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..allocator import recycled_heap
from ..definition import ResolvedGroup, ResolvedModule
from ..errors import ProcessorError
from ..module_access import module_tensor
from .base import LayerContext, ModuleResult, first_tensor, replace_weight

CallArgs = tuple[tuple[Any, ...], dict[str, Any]]


def _output_tensor(out: Any, group: ResolvedGroup) -> torch.Tensor:
    """The output tensor of a call of ``group``'s inspected module: the first item of a tuple / list output, or
    the output itself."""
    tensor = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(tensor, torch.Tensor):
        raise ProcessorError(
            f"AWQ group {group.index}: the inspected module returned {type(tensor).__name__}, expected a tensor "
            "(or a tuple / list whose first item is one)"
        )
    return tensor


DEFAULT_SEARCH_TOKENS = 4096
"""The default token budget of the scale search's replays of an ``inspect`` block (see :class:`AWQProcessor`)."""


def spread_calls(calls: list[CallArgs], budget: int | None) -> list[CallArgs]:
    """The recorded calls of an inspected block that a scale search replays: all of them when ``budget`` is
    ``None`` or their tokens fit it, else ``k`` evenly spaced ones (first and last included), ``k`` the
    most whose mean token count fits ``budget`` (at least one). A call's tokens: its first tensor argument's
    elements over its last dimension (padding included)."""
    if budget is None or not calls:
        return calls
    tokens = [_call_tokens(args, kwargs) for args, kwargs in calls]
    if sum(tokens) <= budget:
        return calls
    k = max(1, min(len(calls), int(budget * len(calls) // max(1, sum(tokens)))))
    if k == 1:
        return [calls[0]]
    picks = sorted({round(i * (len(calls) - 1) / (k - 1)) for i in range(k)})
    return [calls[i] for i in picks]


def _call_tokens(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[-1] > 0:
            return value.numel() // value.shape[-1]
    return 0


class AWQProcessor:
    """AWQ over calculation groups (see the module docstring). ``clip=False`` turns the clip search off.

    Scale-search cost (both change results only through float rounding or the tokens scored, and both
    are recorded in :meth:`describe`):

    * ``search_tokens``: a group inspected through a block (``self_attn``, ``mlp``) scores each grid ratio
      on the block's outputs for evenly spaced recorded calls holding at most this many tokens
      (:func:`spread_calls`; default :data:`DEFAULT_SEARCH_TOKENS`; ``None``: every call). The input
      statistics ``x_mean`` always use every token.
    * ``gram_loss``: a group inspected on its own outputs (no ``inspect``: ``o_proj``, ``down_proj``) scores
      every token through ``xᵀx`` (:func:`qalgos.awq_gram.search_scales_gram`) instead of a forward per
      ratio; ``False`` runs the forwards.
    """

    method = "awq"
    needs_calibration = True

    def __init__(
        self,
        spec: QuantSpec,
        *,
        clip: bool = True,
        search_tokens: int | None = DEFAULT_SEARCH_TOKENS,
        gram_loss: bool = True,
    ) -> None:
        if search_tokens is not None and search_tokens < 1:
            raise ProcessorError(
                f"search_tokens: expected a positive token count or None (every call), found {search_tokens}"
            )
        self.spec = spec
        #: the spec the scale search fake-quantizes with (AWQ's own: the run's spec)
        self.search_spec = spec
        self.clip = clip
        self.search_tokens = search_tokens
        self.gram_loss = gram_loss
        self._x: dict[int, dict[str, list[torch.Tensor]]] = {}  # group index -> input key -> captured chunks
        self._inspect_calls: dict[int, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
        self._pending: list[tuple[ResolvedModule, torch.Tensor, dict[str, Any], float]] = []

    def start_layer(self, ctx: LayerContext) -> None:
        self._pending = []

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        xs: dict[str, list[torch.Tensor]] = {}
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._x[group.index], self._inspect_calls[group.index] = xs, calls
        handles = []
        for mod in group.modules:
            if mod.input_key in xs:
                continue
            store: list[torch.Tensor] = []
            xs[mod.input_key] = store

            def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, store: list[torch.Tensor] = store) -> None:
                x = first_tensor(inputs)
                store.append(ctx.valid_tokens(x.detach()).to(torch.float32))

            handles.append(mod.module.register_forward_hook(hook))
        if group.inspect is not None:

            def pre(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                calls.append((tuple(args), dict(kwargs)))

            handles.append(group.inspect.register_forward_pre_hook(pre, with_kwargs=True))
        return handles

    def _forward_with(self, group: ResolvedGroup, x: torch.Tensor) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        # the modules' own weights, copied once per group and restored after every replay
        saved = [mod.weight.detach().clone() for mod in group.modules] if group.inspect is not None else []

        def run(weights: list[torch.Tensor]) -> torch.Tensor:
            if group.inspect is None:
                outs = []
                for mod, w in zip(group.modules, weights, strict=False):
                    bias = getattr(mod.module, "bias", None)
                    y = x @ w.to(torch.float32).T
                    outs.append(y + bias.to(torch.float32) if bias is not None else y)
                return torch.cat(outs, dim=-1)
            try:
                with torch.no_grad():
                    for mod, w in zip(group.modules, weights, strict=False):
                        mod.weight.copy_(w)  # converts as w.to(mod.weight.dtype) would, without the copy
                    calls = spread_calls(self._inspect_calls[group.index], self.search_tokens)
                    outs = [_output_tensor(group.inspect(*a, **kw), group) for a, kw in calls]
            finally:
                with torch.no_grad():
                    for mod, w in zip(group.modules, saved, strict=False):
                        mod.weight.copy_(w)
            return torch.cat([o.reshape(-1, o.shape[-1]).to(torch.float32) for o in outs], dim=0)

        return run

    def _scored_tokens(self, group: ResolvedGroup, x: torch.Tensor) -> int:
        """Tokens the group's scale search scored: those of the replayed calls, or every captured token."""
        if group.inspect is None:
            return int(x.shape[0])
        return sum(_call_tokens(a, kw) for a, kw in spread_calls(self._inspect_calls[group.index], self.search_tokens))

    def _scale_skip_reason(self, group: ResolvedGroup, in_features: int) -> str | None:
        if len(self._x[group.index]) != 1:
            return "modules do not share one input"
        if group.prev_op is None:
            return "no prev_op to fold scales into"
        prev_w = getattr(group.prev_op, "weight", None)
        if not isinstance(prev_w, torch.Tensor):
            return f"prev_op {group.prev_op_name!r} has no weight"
        if prev_w.shape[0] != in_features:
            return f"prev_op {group.prev_op_name!r} output width {prev_w.shape[0]} != group input width {in_features}"
        if group.inspect is not None and not self._inspect_calls[group.index]:
            return f"inspect module {group.spec.inspect!r} was not called during the forward"
        return None

    def _fold(self, group: ResolvedGroup, scales: torch.Tensor, offset: float) -> None:
        """Divide ``prev_op`` (a norm's ``offset + weight`` or a linear's rows) by ``scales``; scale the consumers."""
        prev = group.prev_op
        prev_weight = module_tensor(prev, "weight")
        prev_bias = getattr(prev, "bias", None)
        weight = prev_weight.detach()
        bias = prev_bias.detach() if isinstance(prev_bias, torch.Tensor) else None
        shift = offset if weight.dim() == 1 else 0.0
        new_w, new_b = awq.fold_scales_into_previous(weight.to(torch.float32) + shift, bias, scales)
        with torch.no_grad():
            prev_weight.copy_((new_w - shift).to(prev_weight.dtype))
            if isinstance(prev_bias, torch.Tensor) and new_b is not None:
                prev_bias.copy_(new_b.to(prev_bias.dtype))
            for mod in group.modules:
                mod.weight.copy_(awq.scale_consumer_weight(mod.weight.detach(), scales).to(mod.weight.dtype))

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        xs, scales, notes, spent = self.search_and_fold(ctx, group)
        in_features = int(group.modules[0].weight.shape[1])
        for mod in group.modules:
            x = xs[mod.input_key]
            if x is not None and scales is not None:
                x = x / scales
            x = x if x is not None else torch.empty(0, in_features)
            self._pending.append((mod, x, dict(notes), spent))
        return []

    def search_and_fold(
        self, ctx: LayerContext, group: ResolvedGroup
    ) -> tuple[dict[str, torch.Tensor | None], torch.Tensor | None, dict[str, Any], float]:
        """The group's scale search and fold (its captured inputs released from this processor). Returns the
        captured inputs per input key (``[tokens, in]`` float32, unscaled; None when no token came), the folded
        ``scales [in]`` float32 (None when the group was not scaled), the report notes (ratio, loss, tokens
        scored, or why the search was skipped) and the search's wall seconds per module."""
        xs = {key: torch.cat(chunks, dim=0) if chunks else None for key, chunks in self._x[group.index].items()}
        in_features = int(group.modules[0].weight.shape[1])
        reason = self._scale_skip_reason(group, in_features)
        notes: dict[str, Any] = {}
        scales = None
        spent = 0.0
        x0 = next(iter(xs.values()))
        if reason is None and x0 is not None and x0.shape[0] > 0:
            start = time.perf_counter()
            # every grid ratio makes the same large temporaries: reuse their pages (qlooper.allocator)
            with recycled_heap():
                weights = [m.weight.detach().to(torch.float32) for m in group.modules]
                if group.inspect is None and self.gram_loss:
                    found, scored = search_scales_gram(x0, weights, self.search_spec), f"{x0.shape[0]} (gram)"
                else:
                    forward_with = self._forward_with(group, x0)
                    found = awq.search_scales(x0, weights, forward_with, self.search_spec, scratch=ScratchBuffers())
                    scored = str(self._scored_tokens(group, x0))
                del weights
            scales = found.scales.to(torch.float32)
            self._fold(group, scales, ctx.definition.norm_weight_offset)
            notes = {"scale_ratio": float(found.ratio), "scale_loss": float(found.loss), "scale_tokens": scored}
            spent = (time.perf_counter() - start) / len(group.modules)
        else:
            notes = {"scale_search": f"skipped: {reason or 'no tokens reached the group'}"}
        del self._x[group.index], self._inspect_calls[group.index]
        return xs, scales, notes, spent

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        """Clip search and quantization of every pending module: :func:`clip_and_quantize` jobs, run inline or
        by ``ctx.solve_map`` (a sharded executor); fallback modules are quantized here with RTN."""
        no_clip = set(ctx.definition.awq_no_clip)
        jobs, owners = [], []
        for mod, x, notes, _spent in self._pending:
            if ctx.fallback.get(mod.full_name) is not None:
                continue
            clip = False
            if not self.clip:
                notes["clip_search"] = "off"
            elif mod.name in no_clip:
                notes["clip_search"] = "skipped (awq_no_clip)"
            elif x.shape[0] == 0:
                notes["clip_search"] = "skipped (no tokens)"
            else:
                clip = True
            jobs.append((self.spec, mod.weight.detach(), x, clip))
            owners.append(mod.full_name)
        run = ctx.solve_map or (lambda fn, items: [fn(*item) for item in items])
        solved = dict(zip(owners, run(clip_and_quantize, jobs), strict=True))
        results = []
        for mod, x, notes, spent in self._pending:
            start = time.perf_counter()
            reason = ctx.fallback.get(mod.full_name)
            if reason is not None:
                result, seconds = fall_back(mod.weight.detach(), self.spec, reason, int(x.shape[0])), 0.0
            else:
                result, seconds = solved[mod.full_name]
            replace_weight(mod.module, result.dequantized)
            results.append(
                ModuleResult(
                    mod.full_name,
                    ctx.index,
                    self.method,
                    result,
                    int(x.shape[0]),
                    mod.expert,
                    fallback="rtn" if reason else None,
                    fallback_reason=reason,
                    seconds=spent + seconds + time.perf_counter() - start,
                    notes=notes,
                )
            )
        self._pending = []
        return results

    def describe(self) -> dict[str, Any]:
        """What identifies this processor's numerics (part of a checkpoint's identity)."""
        described: dict[str, Any] = {"method": self.method, "spec": asdict(self.spec), "clip": self.clip}
        if (self.search_tokens, self.gram_loss) != (None, False):  # the full search keeps its old identity
            described |= {"search_tokens": self.search_tokens, "gram_loss": self.gram_loss}
        return described

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def clip_and_quantize(spec: QuantSpec, weight: torch.Tensor, x: torch.Tensor, clip: bool) -> tuple[Any, float]:
    """AWQ quantization of ``weight`` ``[out, in]`` (already scaled), after a clip search on its scaled input
    ``x`` ``[tokens, in]`` when ``clip``. Returns (qalgos ``QuantResult``, wall seconds)."""
    start = time.perf_counter()
    max_values = search_clip(weight.to(torch.float32), x, spec) if clip else None
    return awq.quantize_awq(weight, spec, clip=max_values), time.perf_counter() - start
