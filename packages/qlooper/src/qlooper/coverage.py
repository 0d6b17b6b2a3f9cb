"""Token coverage of a layer's modules: calibration tokens counted per module and the fallback marks.

Shared by the loop (every module it captures) and the expert owners of a sharded MoE layer
(:mod:`qlooper.expert_shards`), so both count and mark exactly alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from qalgos.fallback import FallbackPolicy
from torch import nn

from .definition import ResolvedGroup
from .errors import ProcessorError
from .processors.base import LayerContext, first_tensor


def tokens_in(ctx: LayerContext, x: torch.Tensor) -> int:
    """Calibration tokens in activations ``x`` ``[..., in]`` of the current batch (padding excluded)."""
    mask = ctx.mask_for(x)
    return int(mask.sum()) if mask is not None else x.numel() // max(x.shape[-1], 1)


def count_hook(ctx: LayerContext, name: str) -> Callable[..., None]:
    """A forward hook adding the tokens of each call's first input to ``ctx.tokens[name]``."""

    def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any) -> None:
        ctx.tokens[name] = ctx.tokens.get(name, 0) + tokens_in(ctx, first_tensor(inputs))

    return hook


def mark_fallbacks(ctx: LayerContext, unit: Sequence[ResolvedGroup], policy: FallbackPolicy, total_tokens: int) -> None:
    """Raise on a dense module that saw no token; mark under-covered modules in ``ctx.fallback`` (the reason)."""
    for group in unit:
        for mod in group.modules:
            seen = ctx.tokens.get(mod.full_name, 0)
            if mod.expert is None and seen == 0:
                raise ProcessorError(
                    f"module {mod.full_name}: received no input during the capture forward of group "
                    f"{group.index}; the group's modules may be listed out of forward order"
                )
            reason = policy.reason(seen, total_tokens)
            if reason is not None:
                ctx.fallback[mod.full_name] = reason
