"""Token coverage of a layer's modules: calibration tokens counted per module and the fallback marks.

Shared by the loop (every module it captures) and the expert owners of a sharded MoE layer
(:mod:`qlooper.expert_shards`), so both mark exactly alike; both count with
:class:`~qlooper.worker_statistics.TokenCountHook`.
"""

from __future__ import annotations

from collections.abc import Sequence

from qalgos.fallback import FallbackPolicy

from .definition import ResolvedGroup
from .errors import ProcessorError
from .processors.base import LayerContext


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
