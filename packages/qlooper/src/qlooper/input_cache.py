"""The input cache: what the next decoder layer is called with, batch by batch.

For calibration batch ``b`` the layer runs as ``layer(*layer_inputs[b], **layer_input_kwargs[b])``.
``layer_inputs[b][0]`` is the hidden state ``[B, T, hidden]``; the kwargs hold what the model passed
(attention mask, position ids, rotary tensors, ...). ``token_masks[b]`` is the calibration mask
``[B, T]`` bool (True = real token) used to leave padding out of statistics.

When the model calls its layers with different kwargs (a mask per layer type), ``kwargs_variants[v][b]``
holds variant ``v``'s kwargs for batch ``b`` and ``layer_variant[i]`` layer ``i``'s variant;
:meth:`InputCache.for_layer` selects them. Both are empty when every layer gets layer 0's kwargs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch


@dataclass
class InputCache:
    """Per-batch positional inputs, keyword inputs and token masks of the current layer."""

    layer_inputs: list[list[torch.Tensor]]
    layer_input_kwargs: list[dict[str, Any]]
    token_masks: list[torch.Tensor]
    kwargs_variants: list[list[dict[str, Any]]] = field(default_factory=list)
    layer_variant: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.layer_inputs)

    def call_args(self, batch: int) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """The positional and keyword arguments of the layer call for ``batch``."""
        return self.layer_inputs[batch], self.layer_input_kwargs[batch]

    def for_layer(self, index: int) -> InputCache:
        """The cache with decoder layer ``index``'s keyword arguments (itself when all layers share them)."""
        if not self.layer_variant:
            return self
        if not 0 <= index < len(self.layer_variant):
            raise IndexError(f"input cache: no kwargs recorded for layer {index} ({len(self.layer_variant)} layers)")
        return replace(self, layer_input_kwargs=self.kwargs_variants[self.layer_variant[index]])

    def with_hidden(self, hidden: list[torch.Tensor]) -> InputCache:
        """A cache for the next layer: positional input 0 replaced per batch, everything else shared."""
        if len(hidden) != len(self.layer_inputs):
            raise ValueError(f"with_hidden: expected {len(self.layer_inputs)} batches, found {len(hidden)}")
        inputs = [[h, *rest[1:]] for h, rest in zip(hidden, self.layer_inputs, strict=False)]
        return replace(self, layer_inputs=inputs)

    def to_state(self) -> dict[str, Any]:
        """A value tree of plain containers and tensors (for the continuation codec)."""
        return {
            "layer_inputs": [list(args) for args in self.layer_inputs],
            "layer_input_kwargs": [dict(kw) for kw in self.layer_input_kwargs],
            "token_masks": list(self.token_masks),
            "kwargs_variants": [[dict(kw) for kw in variant] for variant in self.kwargs_variants],
            "layer_variant": list(self.layer_variant),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> InputCache:
        return cls(
            [list(args) for args in state["layer_inputs"]],
            [dict(kw) for kw in state["layer_input_kwargs"]],
            list(state["token_masks"]),
            [[dict(kw) for kw in variant] for variant in state.get("kwargs_variants", [])],
            [int(v) for v in state.get("layer_variant", [])],
        )
