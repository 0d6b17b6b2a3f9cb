"""A forward through a model whose decoder layers sit on the meta device, one layer in memory at a time.

Verify-after-save of a streaming run (:mod:`qhf.verify`) computes the probe logits this way twice: from the
spill area (the quantized model as the run left it) and from the saved files. A forward pre-hook on each
decoder layer calls ``fill(prefix, swap)``, which installs the layer's quantized modules (through
``swap``, :class:`LayerSwap`) and materializes its other tensors; a forward hook puts the original modules
back and sends the layer to meta again. Peak memory: the modules outside the layers plus one layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from qlooper.loop import install_module
from torch import nn

from .source.skeleton import release


@dataclass
class LayerSwap:
    """Modules installed into ``layer`` for one forward and the originals they replaced (in install order)."""

    layer: nn.Module
    replaced: list[tuple[str, nn.Module]] = field(default_factory=list)

    def install(self, rel: str, new: nn.Module) -> None:
        """Put ``new`` at dotted path ``rel`` inside the layer, remembering what was there."""
        self.replaced.append((rel, self.layer.get_submodule(rel)))
        install_module(self.layer, rel, new)

    def undo(self) -> None:
        """Put every replaced module back."""
        for rel, original in reversed(self.replaced):
            install_module(self.layer, rel, original)
        self.replaced.clear()


LayerFill = Callable[[str, LayerSwap], None]


def layerwise_logits(model: nn.Module, layers_path: str, fill: LayerFill, ids: torch.Tensor) -> torch.Tensor:
    """float32 logits ``[batch, tokens, vocab]`` of ``model(input_ids=ids)`` with each decoder layer under
    ``layers_path`` filled just before its forward and released just after (module docstring)."""
    layers = cast(nn.ModuleList, model.get_submodule(layers_path))
    swaps: dict[str, LayerSwap] = {}
    handles = []

    def before(prefix: str) -> Callable[..., None]:
        def hook(module: nn.Module, _args: Any, _kwargs: Any) -> None:
            swaps[prefix] = LayerSwap(module)
            fill(prefix, swaps[prefix])

        return hook

    def after(prefix: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: Any, _kwargs: Any, _output: Any) -> None:
            swaps.pop(prefix).undo()
            release(model, prefix)

        return hook

    for index, layer in enumerate(layers):
        prefix = f"{layers_path}.{index}"
        handles.append(layer.register_forward_pre_hook(before(prefix), with_kwargs=True))
        handles.append(layer.register_forward_hook(after(prefix), with_kwargs=True))
    try:
        with torch.no_grad():
            logits: torch.Tensor = model(input_ids=ids, use_cache=False).logits.float()  # a module call
            return logits
    finally:
        for handle in handles:
            handle.remove()
        for prefix, swap in swaps.items():
            swap.undo()
            release(model, prefix)
