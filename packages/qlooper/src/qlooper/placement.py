"""Where and in which dtype one decoder layer computes while the loop works on it.

:class:`LayerPlacement` (``LoopOptions.device`` / ``LoopOptions.compute_dtype``) moves a layer's parameters
and buffers to the compute device, and with a compute dtype casts its floating-point ones to it, for the
layer's forwards; afterwards it puts every tensor back where (and in the dtype) it was. With a compute
dtype:

* a forward pre-hook on the layer casts its floating-point inputs (hidden state, rotary tensors, masks) to
  the compute dtype on the compute device, and a forward hook casts the hidden state it returns back to
  the input's dtype, so the input cache keeps its dtype (float32 for a float32 model);
* the original tensors (the float32 masters, on their own device) are kept; :meth:`solving` swaps them in
  for the modules being solved, so a solve reads the source weight, not its compute-dtype rounding, and the
  reconstructed weight it writes lands in the master; it is then cast again for the next forwards;
* everything else (norm weights ...) gets its original tensor back, bit for bit, when the layer is done.

Statistics are taken from the activations the forwards produce (compute dtype) and accumulated in float32 by
the processor (qalgos' Hessian buffer is float32). Without a compute dtype and with the layer already on the
device, nothing is moved and no hook is installed: the loop runs exactly as without a placement.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .capture import to_device
from .definition import ResolvedModule


@dataclass
class _Moved:
    """One parameter or buffer that was moved: its owner, its kind and key, and its original tensor."""

    module: nn.Module
    kind: str  # "param" | "buffer"
    key: str
    original: torch.Tensor


class LayerPlacement:
    """Moves/casts one layer for its work (see the module docstring). ``device`` None: where it is;
    ``dtype`` None or float32: the layer's own dtypes (no cast, no hooks)."""

    def __init__(self, layer: nn.Module, device: torch.device | None, dtype: torch.dtype | None) -> None:
        self.layer = layer
        self.device = device
        self.dtype = dtype if dtype is not None and dtype != torch.float32 else None
        self._moved: list[_Moved] = []
        self._by_tensor: dict[int, _Moved] = {}
        self._handles: list[RemovableHandle] = []
        self._output_dtype: torch.dtype | None = None

    def _target(self, tensor: torch.Tensor) -> torch.Tensor:
        cast = self.dtype if self.dtype is not None and tensor.is_floating_point() else None
        return tensor.to(device=self.device, dtype=cast)

    def enter(self) -> None:
        """Move (and cast) the layer's tensors; install the input/output cast hooks with a compute dtype."""
        for module in self.layer.modules():
            for key, param in module._parameters.items():
                if param is None:
                    continue
                data = param.data
                if data.is_meta:  # not loaded: nothing to move
                    continue
                target = self._target(data)
                if target is not data:
                    moved = _Moved(module, "param", key, data)
                    param.data = target
                    self._moved.append(moved)
                    self._by_tensor[id(param)] = moved
            for key, buffer in module._buffers.items():
                if buffer is None or buffer.is_meta:
                    continue
                target = self._target(buffer)
                if target is not buffer:
                    self._moved.append(_Moved(module, "buffer", key, buffer))
                    module._buffers[key] = target
        if self.dtype is not None:
            self._handles.append(self.layer.register_forward_pre_hook(self._cast_inputs, with_kwargs=True))
            self._handles.append(self.layer.register_forward_hook(self._cast_output))

    def _cast_inputs(
        self, _layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        first = args[0] if args else None
        if isinstance(first, torch.Tensor):
            self._output_dtype = first.dtype
        return to_device(args, self.device, dtype=self.dtype), to_device(kwargs, self.device, dtype=self.dtype)

    def _cast_output(self, _layer: nn.Module, _args: tuple[Any, ...], output: Any) -> Any:
        dtype = self._output_dtype
        if dtype is None:
            return output
        if isinstance(output, torch.Tensor):
            return output.to(dtype)
        if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
            return (output[0].to(dtype), *output[1:])
        return output

    @contextmanager
    def solving(self, modules: Sequence[ResolvedModule]) -> Iterator[None]:
        """With a compute dtype: the modules' weights are their masters (original dtype and device) inside
        the block, and their compute-dtype copies, cast from the (solved) masters, after it."""
        swapped = []
        if self.dtype is not None:
            for mod in modules:
                param = mod.module._parameters.get("weight")
                moved = self._by_tensor.get(id(param)) if param is not None else None
                if param is not None and moved is not None:
                    param.data = moved.original
                    swapped.append(param)
        try:
            yield
        finally:
            for param in swapped:
                param.data = self._target(param.data)

    def exit(self) -> None:
        """Remove the hooks and put every moved tensor back: with a compute dtype its original (masters keep
        what the solves wrote into them), otherwise its current value moved back to the original device."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for moved in reversed(self._moved):
            if moved.kind == "param":
                param = moved.module._parameters[moved.key]
                if param is not None:
                    param.data = moved.original if self.dtype is not None else param.data.to(moved.original.device)
            else:
                current = moved.module._buffers[moved.key]
                if self.dtype is not None or current is None:
                    moved.module._buffers[moved.key] = moved.original
                else:
                    moved.module._buffers[moved.key] = current.to(moved.original.device)
        self._moved, self._by_tensor = [], {}
