"""The capture side of qhf's statistics-only processors (sensitivity, learned rotations): every group's input is
handed to the processor's ``_add(ctx, input_key, x)`` once per input, in lockstep or from a forward hook."""

from __future__ import annotations

from typing import Any

import torch
from qlooper.definition import ResolvedGroup
from qlooper.processors.base import LayerContext, first_tensor
from torch import nn
from torch.utils.hooks import RemovableHandle


class HookedInputs:
    """Mixin: :meth:`observe` (lockstep) and :meth:`attach` (forward hooks, one per distinct input) call the
    subclass's ``_add(ctx, key, x)`` with ``x`` ``[B, T, in]``, the input every module of the group reads."""

    def _add(self, ctx: LayerContext, key: str, x: torch.Tensor) -> None:
        raise NotImplementedError

    def observe(self, ctx: LayerContext, group: ResolvedGroup, x: torch.Tensor) -> None:
        """Lockstep: ``x`` ``[B, T, in]`` is the input every module of ``group`` reads."""
        self._add(ctx, group.modules[0].input_key, x)

    def attach(self, ctx: LayerContext, group: ResolvedGroup) -> list[RemovableHandle]:
        handles = []
        hooked: set[str] = set()
        for mod in group.modules:
            if mod.input_key in hooked:
                continue
            hooked.add(mod.input_key)

            def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, key: str = mod.input_key) -> None:
                self._add(ctx, key, first_tensor(inputs))

            handles.append(mod.module.register_forward_hook(hook))
        return handles
