"""The input cache: what the next decoder layer is called with, batch by batch.

For calibration batch ``b`` the layer runs as ``layer(*layer_inputs[b], **layer_input_kwargs[b])``.
``layer_inputs[b][0]`` is the hidden state ``[B, T, hidden]``; the kwargs hold what the model passed
(attention mask, position ids, rotary tensors, ...). ``token_masks[b]`` is the calibration mask
``[B, T]`` bool (True = real token) used to leave padding out of statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class InputCache:
    """Per-batch positional inputs, keyword inputs and token masks of the current layer."""

    layer_inputs: list[list[torch.Tensor]]
    layer_input_kwargs: list[dict[str, Any]]
    token_masks: list[torch.Tensor]

    def __len__(self) -> int:
        return len(self.layer_inputs)

    def call_args(self, batch: int) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """The positional and keyword arguments of the layer call for ``batch``."""
        return self.layer_inputs[batch], self.layer_input_kwargs[batch]

    def with_hidden(self, hidden: list[torch.Tensor]) -> InputCache:
        """A cache for the next layer: positional input 0 replaced per batch, everything else shared."""
        if len(hidden) != len(self.layer_inputs):
            raise ValueError(f"with_hidden: expected {len(self.layer_inputs)} batches, found {len(hidden)}")
        inputs = [[h, *rest[1:]] for h, rest in zip(hidden, self.layer_inputs, strict=False)]
        return InputCache(inputs, self.layer_input_kwargs, self.token_masks)

    def to_state(self) -> dict[str, Any]:
        """A value tree of plain containers and tensors (for the continuation codec)."""
        return {
            "layer_inputs": [list(args) for args in self.layer_inputs],
            "layer_input_kwargs": [dict(kw) for kw in self.layer_input_kwargs],
            "token_masks": list(self.token_masks),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> InputCache:
        return cls(
            [list(args) for args in state["layer_inputs"]],
            [dict(kw) for kw in state["layer_input_kwargs"]],
            list(state["token_masks"]),
        )
