"""Forwards of one decoder layer over the cached calibration batches.

``capture_forward`` runs the layer with hooks installed, stopping each batch early after the group's
last module when ``stop_after`` is given; ``replay_forward`` runs the whole (quantized) layer and returns
its outputs, which become the next layer's inputs. Cached inputs are moved to the layer's device (its
first parameter's) for each call; replay outputs go back to the cache's device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .capture import to_device
from .errors import StopForward
from .input_cache import InputCache
from .processors.base import LayerContext


def layer_output(out: Any) -> torch.Tensor:
    """The hidden state of a layer's return value (the first element of a tuple/list)."""
    hidden = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(f"decoder layer output: expected a tensor or a tuple starting with one, found {type(out)}")
    return hidden


def layer_device(layer: nn.Module) -> torch.device:
    """Where ``layer`` computes: its first parameter's (or buffer's) device, CPU when it has none."""
    for tensor in (*layer.parameters(), *layer.buffers()):
        return tensor.device
    return torch.device("cpu")


def _stop_hook(_module: nn.Module, _inputs: tuple[Any, ...], _out: Any) -> None:
    raise StopForward("group statistics captured")


def capture_forward(ctx: LayerContext, stop_after: nn.Module | None) -> None:
    """Run every cached batch through ``ctx.layer`` (hooks must be installed by the caller)."""
    if ctx.cache is None:
        raise ValueError("capture_forward: the layer has no input cache")
    handle = stop_after.register_forward_hook(_stop_hook) if stop_after is not None else None
    device = layer_device(ctx.layer)
    try:
        with torch.no_grad():
            for b in range(len(ctx.cache)):
                args, kwargs = to_device(ctx.cache.call_args(b), device)
                ctx.batch, ctx.mask = b, ctx.cache.token_masks[b].to(device)
                try:
                    ctx.layer(*args, **kwargs)
                except StopForward:
                    pass
    finally:
        ctx.batch, ctx.mask = -1, None
        if handle is not None:
            handle.remove()


def replay_forward(layer: nn.Module, cache: InputCache) -> InputCache:
    """The next layer's cache: ``layer`` run on every batch, outputs replacing positional input 0."""
    outputs = []
    device = layer_device(layer)
    with torch.no_grad():
        for b in range(len(cache)):
            args, kwargs = to_device(cache.call_args(b), device)
            hidden = cache.layer_inputs[b][0]
            outputs.append(layer_output(layer(*args, **kwargs)).detach().to(hidden.device))
    return cache.with_hidden(outputs)
