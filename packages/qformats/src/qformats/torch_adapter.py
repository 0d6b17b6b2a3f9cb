"""Optional torch interop: the only qformats module that imports torch (lazily, inside functions).

Conversions share memory where the dtypes allow it (CPU tensors and numpy arrays of the same
dtype); otherwise they copy and say so in the docstring. numpy has no bfloat16: bfloat16 tensors
become float32 arrays (exact), which keeps scales bit-faithful when converted back with
``dtype="bfloat16"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import QFormatsError
from .logical import QuantizedWeight


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        raise QFormatsError("torch is not installed: install qformats[torch] to use qformats.torch_adapter") from None
    return torch


def to_numpy(tensor: Any) -> np.ndarray:
    """A numpy view of a CPU tensor (no copy); GPU tensors are copied to host; bfloat16 -> float32 copy."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise QFormatsError(f"to_numpy: expected a torch.Tensor, found {type(tensor).__name__}")
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    return np.asarray(tensor.numpy())


def to_torch(array: np.ndarray, dtype: str | None = None) -> Any:
    """A CPU tensor sharing ``array``'s memory when it is writable and native-endian, else a copy.

    ``dtype="bfloat16"`` converts float arrays to bfloat16 (a copy).
    """
    torch = _torch()
    arr = np.asarray(array)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.writeable:
        arr = arr.copy()
    tensor = torch.from_numpy(arr)
    if dtype is not None:
        tensor = tensor.to(getattr(torch, dtype))
    return tensor


def tensors_to_numpy(tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{name: tensor}`` -> ``{name: array}`` (see :func:`to_numpy`)."""
    return {name: to_numpy(t) for name, t in tensors.items()}


def tensors_to_torch(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{name: array}`` -> ``{name: tensor}`` (see :func:`to_torch`)."""
    return {name: to_torch(a) for name, a in arrays.items()}


def weight_from_torch(
    codes: Any,
    scales: Any,
    zeros: Any,
    g_idx: Any,
    *,
    bits: int,
    group_size: int,
    sym: bool,
) -> QuantizedWeight:
    """A :class:`QuantizedWeight` from torch tensors (codes ``[out, in]``, scales/zeros ``[G, out]``).

    Codes become uint8, zeros and g_idx int32 (copies when the dtypes differ); scales keep their dtype
    (bfloat16 becomes float32).
    """
    return QuantizedWeight(
        codes=to_numpy(codes).astype(np.uint8, copy=False),
        scales=to_numpy(scales),
        zeros=to_numpy(zeros).astype(np.int32, copy=False),
        g_idx=to_numpy(g_idx).astype(np.int32, copy=False),
        bits=bits,
        group_size=group_size,
        sym=sym,
    )


def weight_to_torch(weight: QuantizedWeight) -> dict[str, Any]:
    """``{"codes", "scales", "zeros", "g_idx"}`` as CPU tensors sharing the weight's memory."""
    return {name: to_torch(getattr(weight, name)) for name in ("codes", "scales", "zeros", "g_idx")}
