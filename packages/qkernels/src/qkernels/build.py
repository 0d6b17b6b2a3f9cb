"""Building quantized linear modules: from checkpoint tensors, from a logical weight, and by repacking.

Every path goes through :func:`qkernels.selection.select` with the unpacked weight, so the module that comes
back is exactly the backend the explanation names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from qformats.layouts.registry import LayoutMeta
from qformats.logical import QuantizedWeight

from .checkpoint import LoadedCheckpoint, load_checkpoint, pack_weight
from .cpu_extension import ExtensionBuildError
from .device import Target, resolve_target
from .module import QuantLinear
from .registry import AUTO, get_backend
from .selection import Selection, select

log = logging.getLogger(__name__)


def build_module(
    loaded: LoadedCheckpoint,
    *,
    backend: str = AUTO,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    emulate: bool = False,
    **options: Any,
) -> QuantLinear:
    """Select a backend for an already-read checkpoint module and build it (see :func:`quant_linear`)."""
    target = resolve_target(device, emulate=emulate)
    chosen = select(loaded.contract, target, dtype, backend=backend, logical=loaded.logical)
    try:
        module = get_backend(chosen.backend)(loaded, target, **options)
    except ExtensionBuildError as exc:
        if backend != AUTO:
            raise
        # Same results, slower kernel: logged, and the failed build is now a recorded rejection reason.
        log.warning("qkernels: backend %r could not be built (%s); selecting again", chosen.backend, exc)
        chosen = select(loaded.contract, target, dtype, backend=backend, logical=loaded.logical)
        module = get_backend(chosen.backend)(loaded, target, **options)
    module.selection = chosen  # type: ignore[assignment]
    return module.to(target.torch_device)


def quant_linear(
    fmt: str,
    tensors: Mapping[str, object],
    meta: LayoutMeta,
    *,
    backend: str = AUTO,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    method: str | None = None,
    emulate: bool = False,
    **options: Any,
) -> QuantLinear:
    """A module for one checkpoint module's tensors (keys without prefix; optional ``bias``).

    ``dtype`` is the activation dtype the module will serve; ``options`` go to the backend's constructor
    (e.g. ``cache_dense=True`` for ``torch``). The chosen :class:`Selection` is kept as ``module.selection``.
    """
    loaded = load_checkpoint(fmt, tensors, meta, method=method)
    return build_module(loaded, backend=backend, device=device, dtype=dtype, emulate=emulate, **options)


def quant_linear_from_weight(
    weight: QuantizedWeight,
    fmt: str,
    *,
    bias: object | None = None,
    pack_dtype: str = "int32",
    backend: str = AUTO,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    method: str | None = None,
    emulate: bool = False,
    **options: Any,
) -> QuantLinear:
    """Pack ``weight`` into layout ``fmt`` (kept as the checkpoint tensors), then build as :func:`quant_linear`."""
    tensors, meta = pack_weight(weight, fmt, pack_dtype=pack_dtype, bias=bias)
    return quant_linear(
        fmt, tensors, meta, backend=backend, device=device, dtype=dtype, method=method, emulate=emulate, **options
    )


def repack(
    module: QuantLinear,
    backend: str = AUTO,
    *,
    device: str | torch.device | Target | None = None,
    dtype: torch.dtype | None = None,
    emulate: bool = False,
    **options: Any,
) -> QuantLinear:
    """The same layer on another backend/device/dtype, built from ``module.checkpoint_tensors()``.

    The checkpoint-facing tensors travel unchanged, so saving after a repack writes the original layout.
    Returns ``module`` itself when the selection lands on its own backend and target with no options.
    """
    target = module.target if device is None else resolve_target(device, emulate=emulate)
    previous: Selection | None = getattr(module, "selection", None)
    act_dtype = dtype if dtype is not None else (previous.dtype if previous is not None else torch.float32)
    chosen = select(module.contract, target, act_dtype, backend=backend, logical=module.logical)
    if chosen.backend == module.NAME and target == module.target and not options:
        return module
    tensors = module.checkpoint_tensors()
    bias = tensors.pop("bias", None)
    loaded = LoadedCheckpoint(module.format, module.meta, tensors, bias, module.logical, module.contract)
    return build_module(loaded, backend=chosen.backend, device=target, dtype=act_dtype, **options)
