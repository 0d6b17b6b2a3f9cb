"""Native inputs: what each module of a layer reads when the model is still unquantized (GPTAQ, FOEM).

The loop's input cache follows the quantized path (each layer replays its quantized weights). GPTAQ also
needs every module's input in the *native* model: the float model run from the embeddings to this module.
:class:`NativeInputs` keeps the native hidden state ``[B, T, hidden]`` per calibration batch (the first
layer's is the captured cache itself) and, at each layer start, before anything in the layer is
quantized, runs the layer over it once: forward hooks record the input of the first module of every
input key (``[B, T, in]`` per batch, on the cache's device, in the activation dtype), and the layer's
outputs become the next layer's native hidden states. The same keyword arguments (masks, rotary tensors)
serve both paths. The hidden states are the resume state (:meth:`state_dict`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .capture import to_device
from .definition import ResolvedGroup
from .errors import ProcessorError
from .forward import layer_device, layer_output
from .input_cache import InputCache
from .processors.base import first_tensor


class NativeInputs:
    """Native hidden states across layers and the current layer's native module inputs."""

    def __init__(self) -> None:
        self.hidden: list[torch.Tensor] | None = None
        self._inputs: dict[str, list[list[torch.Tensor]]] = {}
        self._taken: dict[tuple[str, int], int] = {}

    def capture_layer(self, layer: nn.Module, cache: InputCache, groups: list[ResolvedGroup]) -> None:
        """Run the still-float ``layer`` over the native hidden states (``cache`` supplies the kwargs and
        masks), recording the input of each input key's first module; advance the hidden states."""
        if self.hidden is None:
            self.hidden = [args[0] for args in cache.layer_inputs]
        if len(self.hidden) != len(cache):
            raise ProcessorError(f"native inputs: {len(self.hidden)} batches kept, the input cache has {len(cache)}")
        native = cache.with_hidden(self.hidden)
        self._inputs, self._taken = {}, {}
        batch = [-1]
        handles = []
        seen: set[str] = set()
        for group in groups:
            for mod in group.modules:
                if mod.input_key in seen:
                    continue
                seen.add(mod.input_key)
                if mod.expert is not None or group.spec.is_expert_group:
                    raise ProcessorError(
                        f"module {mod.full_name}: GPTAQ/FOEM with alpha > 0 needs token-aligned native "
                        "inputs, which routed expert modules do not have; use alpha 0 (FOEM) or plain GPTQ"
                    )
                store = self._inputs.setdefault(mod.input_key, [[] for _ in range(len(native))])

                def hook(_m: nn.Module, inputs: tuple[Any, ...], _out: Any, store: list[list[Any]] = store) -> None:
                    x = first_tensor(inputs)
                    store[batch[0]].append(x.detach().to(native.layer_inputs[batch[0]][0].device))

                handles.append(mod.module.register_forward_hook(hook))
        outputs = []
        device = layer_device(layer)
        try:
            with torch.no_grad():
                for b in range(len(native)):
                    batch[0] = b
                    args, kwargs = to_device(native.call_args(b), device)
                    hidden = native.layer_inputs[b][0]
                    outputs.append(layer_output(layer(*args, **kwargs)).detach().to(hidden.device))
        finally:
            for handle in handles:
                handle.remove()
        self.hidden = outputs

    def take(self, input_key: str, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The next native input of ``input_key`` for ``batch`` (calls of one batch in order), on ``like``'s
        device; raises :class:`ProcessorError` when none is left or its shape differs from ``like``."""
        calls = self._inputs.get(input_key)
        if calls is None or not 0 <= batch < len(calls):
            raise ProcessorError(f"native inputs: none recorded for input {input_key!r}, batch {batch}")
        index = self._taken.get((input_key, batch), 0)
        if index >= len(calls[batch]):
            raise ProcessorError(
                f"native inputs: input {input_key!r} batch {batch} was called {index + 1} times on the "
                f"quantized path but {len(calls[batch])} times on the native path"
            )
        self._taken[(input_key, batch)] = index + 1
        x = calls[batch][index]
        if tuple(x.shape) != tuple(like.shape):
            raise ProcessorError(
                f"native inputs: input {input_key!r} batch {batch}: native shape {tuple(x.shape)} differs from "
                f"the quantized path's {tuple(like.shape)}"
            )
        if self._taken[(input_key, batch)] == len(calls[batch]):
            calls[batch] = []  # every call consumed: free it
            self._taken[(input_key, batch)] = 0
        return x.to(like.device)

    def end_layer(self) -> None:
        """Drop the layer's module inputs (the hidden states stay for the next layer)."""
        self._inputs, self._taken = {}, {}

    def state_dict(self) -> dict[str, Any]:
        return {"hidden": list(self.hidden) if self.hidden is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        hidden = state.get("hidden")
        if hidden is not None and not (isinstance(hidden, list) and all(isinstance(h, torch.Tensor) for h in hidden)):
            raise ProcessorError(
                f"native inputs state: 'hidden' must be a list of tensors, found {type(hidden).__name__}"
            )
        self.hidden = list(hidden) if hidden is not None else None
        self.end_layer()
