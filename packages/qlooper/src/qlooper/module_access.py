"""Typed reads of attributes that torch modules hold dynamically.

``nn.Module.__getattr__`` is typed ``Tensor | Module``, so ``module.weight`` or ``linear.in_features`` says
nothing to a type checker. These functions read such an attribute, check what it is, and refuse with the
module's type and the attribute's name when it is not what a quantizable linear-like module holds.
"""

from __future__ import annotations

import torch
from torch import nn


def module_tensor(module: nn.Module | None, name: str) -> torch.Tensor:
    """``module.<name>`` (a weight or bias: a parameter or buffer), refused by name when it is not a tensor."""
    value = getattr(module, name, None)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{type(module).__name__}.{name}: expected a tensor, found {type(value).__name__}")
    return value


def linear_features(module: nn.Module) -> tuple[int, int]:
    """``(in_features, out_features)`` of a linear-like module, refused by name when either is not an int."""
    n_in, n_out = getattr(module, "in_features", None), getattr(module, "out_features", None)
    if not isinstance(n_in, int) or not isinstance(n_out, int):
        raise TypeError(
            f"{type(module).__name__}: expected int in_features and out_features, found "
            f"{type(n_in).__name__} and {type(n_out).__name__}"
        )
    return n_in, n_out
