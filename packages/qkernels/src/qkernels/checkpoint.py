"""Reading a module's checkpoint tensors through its qformats layout.

``tensors`` are the checkpoint keys without the module prefix (``qweight``, ``qzeros``, ``scales``,
``g_idx``, optional ``bias``...), as numpy arrays or CPU torch tensors. They are copied, never mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight

from .contract import KernelContract
from .errors import KernelInputError


def to_numpy(name: str, value: object) -> np.ndarray:
    """A private numpy copy of one checkpoint tensor (bfloat16 becomes float32, which is exact)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy().copy()
    if isinstance(value, np.ndarray):
        return value.copy()
    raise KernelInputError(f"tensor {name!r}: expected a numpy array or torch tensor, found {type(value).__name__}")


@dataclass(frozen=True, eq=False)
class LoadedCheckpoint:
    """A module's checkpoint tensors (copied), its bias, its logical weight and its contract.

    ``logical`` is a :class:`QuantizedWeight` for integer-code families; codebook families return
    their own logical object, which must offer ``dequantize() -> float32 [out, in]``.
    """

    format: str
    meta: LayoutMeta
    tensors: dict[str, np.ndarray]
    bias: np.ndarray | None
    logical: object
    contract: KernelContract


def load_checkpoint(
    fmt: str, tensors: Mapping[str, object], meta: LayoutMeta, *, method: str | None = None
) -> LoadedCheckpoint:
    """Copy ``tensors``, unpack them with layout ``fmt`` and derive the kernel contract.

    Raises the layout's LayoutError for malformed tensors and :class:`KernelInputError` for a bias of
    the wrong shape.
    """
    fmt = str(getattr(fmt, "value", fmt))
    arrays = {str(k): to_numpy(str(k), v) for k, v in tensors.items()}
    bias = arrays.pop("bias", None)
    if bias is not None and bias.shape != (meta.out_features,):
        raise KernelInputError(f"tensor 'bias': expected shape ({meta.out_features},), found {bias.shape}")
    logical = get_layout(fmt).unpack(arrays, meta)
    act_order = isinstance(logical, QuantizedWeight) and not logical.has_default_g_idx()
    contract = KernelContract.from_meta(fmt, meta, method=method, act_order=act_order)
    if not isinstance(logical, QuantizedWeight):
        contract = replace(contract, logical_kind=type(logical).__name__)
    return LoadedCheckpoint(fmt, meta, arrays, bias, logical, contract)


def pack_weight(
    weight: QuantizedWeight, fmt: str, *, pack_dtype: str = "int32", bias: object | None = None
) -> tuple[dict[str, np.ndarray], LayoutMeta]:
    """Lay a logical weight out in layout ``fmt``; returns (tensors incl. optional ``bias``, meta)."""
    layout = get_layout(fmt)
    why = layout.cannot_represent(weight)
    if why is not None:
        raise KernelInputError(f"format {fmt!r} cannot hold this weight: {why}")
    tensors = dict(layout.pack(weight, pack_dtype=pack_dtype))
    if bias is not None:
        tensors["bias"] = to_numpy("bias", bias)
    meta = LayoutMeta(
        bits=weight.bits,
        group_size=weight.group_size,
        in_features=weight.in_features,
        out_features=weight.out_features,
        sym=weight.sym,
        pack_dtype=pack_dtype,
    )
    return tensors, meta
