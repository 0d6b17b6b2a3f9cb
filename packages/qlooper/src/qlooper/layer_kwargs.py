"""Per-layer call keyword arguments, recorded in the first capture forward and shared between layers.

A model may call its decoder layers with different keyword arguments: transformers passes each layer
the mask and rotary embeddings of its layer type (Gemma 2/3, Cohere 2, GPT-OSS: sliding-window or full
attention). Replaying layer 0's kwargs for every layer would calibrate the other type with the wrong
mask. :class:`LayerCallRecorder` replaces every layer's ``forward`` (on the instance, so attributes the
model reads from its layers stay) with a stand-in that records the call and returns the hidden state
unchanged; the last layer's stand-in ends the forward with :class:`~qlooper.errors.StopForward`. No layer
computes, so layers whose weights are not loaded yet (meta) are fine; forward hooks of the layers do run.

Layers whose kwargs are the same objects (or equal values) in every batch share one *variant*; only
variants are stored (a 2-type model stores two), and tensors shared between variants are moved once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .errors import CaptureError, StopForward

_PLAIN = (type(None), bool, int, float, str)


def same_value(a: Any, b: Any) -> bool:
    """Whether two call arguments are the same object or equal (tensors: dtype, shape, device, values)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and type(a) is type(b):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return isinstance(a, _PLAIN) and type(a) is type(b) and a == b


def same_kwargs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two layers' recorded keyword arguments are interchangeable."""
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


class LayerCallRecorder:
    """Stand-in forwards on ``layers`` while active (a context manager); ``calls[i]`` is layer ``i``'s
    ``(args, kwargs)`` of the current batch, ``kwargs`` filtered by ``keep(name)``.

    A stand-in returns its hidden-state input; with ``output_arity`` ``n`` (layers that return a tuple the
    model unpacks, e.g. ``hidden, attn_weights = layer(...)``) it returns ``(hidden, None, ...)`` of ``n``."""

    def __init__(
        self, layers: Sequence[nn.Module], keep: Callable[[str], bool], output_arity: int | None = None
    ) -> None:
        self.layers = list(layers)
        self.keep = keep
        self.output_arity = output_arity
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]] | None] = [None] * len(self.layers)
        self._saved: list[Any] = []

    def _stand_in(self, index: int) -> Callable[..., Any]:
        last = index == len(self.layers) - 1

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self.calls[index] is not None:
                raise CaptureError(
                    f"decoder layer {index} ran twice in one forward (a model that repeats layers, such as a "
                    "looped or recurrent-depth model): layer-by-layer quantization calibrates each layer once"
                )
            self.calls[index] = (args, {k: v for k, v in kwargs.items() if self.keep(k)})
            if last:
                raise StopForward("decoder layer calls recorded")
            hidden = args[0] if args else kwargs.get("hidden_states")
            if self.output_arity is None:
                return hidden
            return (hidden,) + (None,) * (self.output_arity - 1)

        return forward

    def __enter__(self) -> LayerCallRecorder:
        for index, layer in enumerate(self.layers):
            self._saved.append(layer.__dict__.get("forward"))
            layer.forward = self._stand_in(index)
        return self

    def __exit__(self, *_exc: object) -> None:
        for layer, saved in zip(self.layers, self._saved, strict=False):
            if saved is None:
                del layer.forward
            else:
                layer.forward = saved
        self._saved = []

    def reset(self) -> None:
        """Forget the calls of the previous batch."""
        self.calls = [None] * len(self.layers)


def batch_classes(calls: Sequence[dict[str, Any]]) -> list[int]:
    """Per layer, the first layer whose kwargs are interchangeable with its own (in one batch)."""
    classes: list[int] = []
    for index, kwargs in enumerate(calls):
        match = next((c for c in sorted(set(classes)) if same_kwargs(calls[c], kwargs)), index)
        classes.append(match)
    return classes


def variants_of(per_batch_classes: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """``(layer_variant, representatives)``: layers grouped by their class in every batch; per variant,
    per batch, the layer whose recorded kwargs stand for it."""
    keys: list[tuple[int, ...]] = []
    layer_variant: list[int] = []
    layers = len(per_batch_classes[0]) if per_batch_classes else 0
    for layer in range(layers):
        key = tuple(classes[layer] for classes in per_batch_classes)
        if key not in keys:
            keys.append(key)
        layer_variant.append(keys.index(key))
    return layer_variant, [list(key) for key in keys]
