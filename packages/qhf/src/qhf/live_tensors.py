"""The in-memory value of a checkpoint tensor name: a materialized parameter or buffer of the model, if any."""

from __future__ import annotations

import torch
from torch import nn


def live_tensor(model: nn.Module, name: str) -> torch.Tensor | None:
    """``model``'s parameter or buffer at dotted ``name`` (``model.layers.0.input_layernorm.weight``) when it is
    materialized; None when the module does not exist, has no such tensor, or holds it on the meta device."""
    module_name, _, pname = name.rpartition(".")
    try:
        module = model.get_submodule(module_name) if module_name else model
    except AttributeError:
        return None
    value: torch.Tensor | None = module._parameters.get(pname)
    if value is None:
        value = module._buffers.get(pname)
    if value is None or value.device.type == "meta":
        return None
    return value
