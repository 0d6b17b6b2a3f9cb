"""The ``replace_module`` callback: swap each finished dense module for a qkernels quantized module.

``kernel_replacer(backend=AUTO, device="cpu", dtype=None, *, pack_dtype="int32", family_options=None,
wrap=None)`` returns ``(name, dense, finalized) -> nn.Module``. The finalized module's logical weight names
its family through qformats' weight-family registry (``family_of``):

* ``integer`` (a ``QuantizedWeight``): ``qkernels.quant_linear(finalized.format, tensors, meta)`` with the
  weight's bits / group size / dims / symmetry and ``pack_dtype``.
* any other family (FP8, bitsandbytes, GGUF blocks, QQQ, ParoQuant, ...): ``qkernels.weight_only_linear``
  under the family's config method, with ``family_options(name, finalized)`` as its reading options
  (``config=``, ``qtype=``; the caller knows them from its settings, e.g. the FP8 scheme or a GGUF
  module's ggml type); dims from the logical weight.

``dtype`` defaults to the dense module's weight dtype; ``wrap(name, module)`` may return a wrapper around
the built module (e.g. an EoRA adapter) or the module itself. Backend selection is qkernels' own (its
``module.selection`` explains the choice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from qformats.layouts.families import family_of
from qformats.layouts.registry import LayoutMeta
from qkernels import AUTO, quant_linear, registered_backends, weight_only_linear
from torch import nn

from .finalize import FinalizedModule
from .module_access import module_tensor

FamilyOptions = Callable[[str, FinalizedModule], Mapping[str, Any]]
Wrap = Callable[[str, nn.Module], nn.Module]


def kernel_replacer(
    backend: str = AUTO,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    *,
    pack_dtype: str = "int32",
    family_options: FamilyOptions | None = None,
    wrap: Wrap | None = None,
) -> Callable[[str, nn.Module, FinalizedModule], nn.Module]:
    """A ``LoopOptions.replace_module`` callback building qkernels modules (see the module docstring)."""
    registered_backends()  # load the backend registry on this thread, not concurrently in finalizer workers

    def replace(name: str, dense: nn.Module, done: FinalizedModule) -> nn.Module:
        w = done.weight
        tensors: dict[str, object] = dict(done.tensors())
        if done.bias is not None:
            tensors["bias"] = done.bias
        target_dtype = dtype if dtype is not None else module_tensor(dense, "weight").dtype
        family = family_of(w)
        module: nn.Module
        if family.layout_based:
            meta = LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym, pack_dtype)
            module = quant_linear(done.format, tensors, meta, backend=backend, device=device, dtype=target_dtype)
        else:
            out_features, in_features = family.shape(w)
            options = dict(family_options(name, done)) if family_options is not None else {}
            module = weight_only_linear(
                family.method, tensors, in_features=in_features, out_features=out_features,
                backend=backend, device=device, dtype=target_dtype, **options,
            )  # fmt: skip
        return wrap(name, module) if wrap is not None else module

    return replace
