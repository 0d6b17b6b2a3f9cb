"""The base quantized linear module every backend subclasses.

A module holds the checkpoint-facing tensors of its layout as persistent buffers under their checkpoint
names (so ``state_dict()`` and :meth:`QuantLinear.checkpoint_tensors` give back exactly the layout that
was loaded, even after a repack) plus whatever runtime form its kernel needs (non-persistent buffers); a
backend whose kernel reads a checkpoint tensor as it is uses that buffer and holds no second copy. The
logical weight of an integer layout (one byte per weight) is not kept: :attr:`QuantLinear.logical` unpacks
it from the checkpoint tensors when asked.
``forward`` computes ``x @ W.T + b`` for ``x`` of shape ``[..., in_features]``. Device moves apply to a
module; dtype conversions do not change its stored tensors (the activation dtype is chosen per call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar, cast

import numpy as np
import torch
from qformats.layouts.registry import get_layout
from qformats.logical import QuantizedWeight

from .capabilities import Capabilities, dtype_name
from .checkpoint import LoadedCheckpoint
from .contract import KernelContract
from .device import Target
from .errors import KernelInputError

_Module = TypeVar("_Module", bound="QuantLinear")  # what ``_apply`` returns: the module itself


class QuantLinear(torch.nn.Module):
    """Quantized ``y = x @ W.T + b``. Subclasses set ``NAME``/``CAPS`` and implement ``_matmul``."""

    NAME: ClassVar[str]
    CAPS: ClassVar[Capabilities]
    REQUIRES: ClassVar[str] = ""  # one line naming runtime prerequisites, shown in docs/explanations
    bias: torch.Tensor | None  # a registered buffer: ``[out]`` or absent

    @classmethod
    def runtime_reasons(cls, contract: KernelContract, target: Target) -> list[str]:
        """Reasons beyond the declaration (missing op, missing dependency...). Builds nothing."""
        return []

    @classmethod
    def weight_reasons(cls, logical: object) -> list[str]:
        """Reasons that depend on the actual tensors (e.g. the g_idx structure). Builds nothing."""
        return []

    def __init__(self, loaded: LoadedCheckpoint, target: Target) -> None:
        super().__init__()
        self.format = loaded.format
        self.meta = loaded.meta
        self.contract = loaded.contract
        self.target = target
        # Integer layouts re-derive their logical weight on demand; other families keep their object.
        self._logical = None if isinstance(loaded.logical, QuantizedWeight) else loaded.logical
        # Checkpoint name -> buffer attribute (torch buffer names cannot hold "."; VPTQ's "centroids.weight").
        self._checkpoint_names = {name: name.replace(".", "_") for name in loaded.tensors}
        for name, arr in loaded.tensors.items():
            attribute = self._checkpoint_names[name]
            if hasattr(self, attribute):
                raise KernelInputError(f"tensor {name!r}: name clashes with a module attribute")
            self.register_buffer(attribute, torch.from_numpy(arr))
        self.has_bias = loaded.bias is not None
        self.register_buffer("bias", None if loaded.bias is None else torch.from_numpy(loaded.bias))

    @property
    def in_features(self) -> int:
        return self.contract.in_features

    @property
    def out_features(self) -> int:
        return self.contract.out_features

    @property
    def logical(self) -> object:
        """The logical weight: kept for weight-only families, unpacked from the checkpoint tensors otherwise."""
        if self._logical is not None:
            return self._logical
        tensors = {name: getattr(self, attr).detach().cpu().numpy() for name, attr in self._checkpoint_names.items()}
        return get_layout(self.format).unpack(tensors, self.meta)

    def extra_repr(self) -> str:
        return f"backend={self.NAME}, {self.contract.describe()}, bias={self.has_bias}, target={self.target.describe()}"

    def _apply(self: _Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> _Module:
        """Device moves apply; dtype conversions (``.to(dtype)``, ``.half()``...) leave stored tensors as they
        are: checkpoint tensors must stay byte-exact and kernels need their runtime dtypes. The activation
        dtype is chosen per call."""

        self.drop_runtime_caches()

        def device_only(t: torch.Tensor) -> torch.Tensor:
            moved = fn(t)
            return moved if moved.dtype == t.dtype else t.to(moved.device)

        # torch declares ``nn.Module._apply`` without annotations; it returns the module itself
        apply = cast("Callable[[Callable[[torch.Tensor], torch.Tensor], bool], _Module]", super()._apply)
        return apply(device_only, recurse)

    def drop_runtime_caches(self) -> None:
        """Forget runtime copies derived from the stored tensors (a dense weight, per-dtype scales); called
        before every device move or dtype conversion. The base module keeps none."""

    def checkpoint_tensors(self) -> dict[str, np.ndarray]:
        """The original layout's tensors (and ``bias``), as loaded: what saving must write."""
        out = {name: getattr(self, attr).detach().cpu().numpy().copy() for name, attr in self._checkpoint_names.items()}
        if self.bias is not None:
            out["bias"] = self.bias.detach().cpu().numpy().copy()
        return out

    def dequantized_weight(self) -> torch.Tensor:
        """Float32 ``[out, in]`` on the CPU: the exact dequantization of the logical weight."""
        return torch.from_numpy(self.logical.dequantize())  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise KernelInputError(f"activations: expected last dim {self.in_features}, found shape {tuple(x.shape)}")
        if x.dtype not in self.CAPS.dtypes:
            served = ", ".join(sorted(dtype_name(d) for d in self.CAPS.dtypes))
            raise KernelInputError(
                f"activations: backend {self.NAME!r} serves {{{served}}}, found {dtype_name(x.dtype)}; "
                "repack the module for this dtype"
            )
        lead = x.shape[:-1]
        y = self._matmul(x.reshape(-1, self.in_features))
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x [M, in] @ W.T -> [M, out]`` in ``x.dtype`` (no bias)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement _matmul")


def integer_weight(logical: object, backend: str) -> QuantizedWeight:
    """``logical`` as a QuantizedWeight, or a KernelInputError naming the backend that needs one."""
    if not isinstance(logical, QuantizedWeight):
        raise KernelInputError(
            f"backend {backend!r} needs an integer-code QuantizedWeight, found {type(logical).__name__}"
        )
    return logical
