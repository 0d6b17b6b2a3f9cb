"""A ready-made ``replace_module`` callback: swap each finished dense module for a qkernels quantized linear.

``kernel_replacer(backend=AUTO, device="cpu", dtype=None)`` returns ``(name, dense, finalized) -> QuantLinear``.
The quantized module is built from the finalized module's layout tensors (and bias) with
``qkernels.quant_linear``; ``dtype`` defaults to the dense module's weight dtype. Backend selection is
qkernels' own (its ``module.selection`` explains the choice).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from qformats.layouts.registry import LayoutMeta
from qkernels import AUTO, quant_linear, registered_backends
from torch import nn

from .finalize import FinalizedModule
from .module_access import module_tensor


def kernel_replacer(
    backend: str = AUTO, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> Callable[[str, nn.Module, FinalizedModule], nn.Module]:
    """A ``LoopOptions.replace_module`` callback building qkernels modules (see the module docstring)."""
    registered_backends()  # load the backend registry on this thread, not concurrently in finalizer workers

    def replace(name: str, dense: nn.Module, done: FinalizedModule) -> nn.Module:
        w = done.weight
        meta = LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym)
        tensors: dict[str, object] = dict(done.tensors())
        if done.bias is not None:
            tensors["bias"] = done.bias
        target_dtype = dtype if dtype is not None else module_tensor(dense, "weight").dtype
        return quant_linear(done.format, tensors, meta, backend=backend, device=device, dtype=target_dtype)

    return replace
