"""How a model's decoder layers hand on their results, probed on the discovery replica.

Most layers return the hidden state; some return a tuple the model unpacks (``hidden, attn_weights =
layer(...)``: Bamba; ``hidden, state, attentions = block(...)``: RWKV), and the capture's stand-in layers must
return a tuple of the same length. Some pass an output on to the next layer's call (GLM-MoE-DSA and HY-V4 hand
each layer's ``topk_indices`` to the next as ``prev_topk_indices``): the loop replays each layer from its
recorded inputs alone, so such a model is refused by name before any work.

The probe runs the replica (every layer real, random weights) on ``inputs_embeds [1, 16, hidden]`` (or the
token ids discovery fell back to) and stops
after the second decoder-layer call (the first when the model has one layer): it records the first call's
output and which of its elements the second call receives as a keyword argument (the same object).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from ..errors import UnsupportedArchitectureError
from .discovery_inputs import describe, embeds_inputs


@dataclass(frozen=True)
class LayerOutputs:
    """``arity``: None when a layer returns a tensor, else its tuple's length; ``carried``: tuple position ->
    the keyword under which the next layer's call receives that element."""

    arity: int | None
    carried: dict[int, str] = field(default_factory=dict)


class _Stop(Exception):
    """Ends the probe forward after the layer calls it needs."""


def probe_layer_outputs(replica: nn.Module, layers_path: str, embeds: torch.Tensor | dict[str, Any]) -> LayerOutputs:
    """The layers' output arity and carried outputs (module docstring); ``embeds`` ``[1, T, hidden]``, or the
    forward's keyword arguments (token ids for a model discovery runs on ids:
    :mod:`qhf.architectures.discovery_inputs`)."""
    inputs = embeds if isinstance(embeds, dict) else embeds_inputs(embeds)
    fed = describe(inputs)
    container = cast(nn.ModuleList, replica.get_submodule(layers_path))
    stop_after = min(2, len(container))
    outputs: list[Any] = []
    kwargs_seen: list[dict[str, Any]] = []

    def pre(_m: nn.Module, _args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        kwargs_seen.append(dict(kwargs))

    def post(_m: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], out: Any) -> None:
        outputs.append(out)
        if len(outputs) >= stop_after:
            raise _Stop

    handles = []
    for layer in {id(m): m for m in container}.values():
        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad():
            replica(**inputs)
    except _Stop:
        pass
    except Exception as error:  # the model's own forward: reported as not understood, like discovery's
        raise UnsupportedArchitectureError(
            f"{layers_path}: the output probe forward (random weights, {fed}) failed: {type(error).__name__}: {error}"
        ) from error
    finally:
        for handle in handles:
            handle.remove()
    if not outputs:
        raise UnsupportedArchitectureError(f"{layers_path}: no decoder layer returned in the output probe forward")
    first = outputs[0]
    if not isinstance(first, tuple):
        return LayerOutputs(None)
    carried: dict[int, str] = {}
    if len(kwargs_seen) >= 2:
        for position, element in enumerate(first[1:], start=1):
            if element is None:
                continue
            name = next((k for k, v in kwargs_seen[1].items() if v is element), None)
            if name is not None:
                carried[position] = name
    return LayerOutputs(len(first), carried)


def check_not_carried(found: LayerOutputs, layers_path: str) -> None:
    """Refuse (UnsupportedArchitectureError) a model whose layers pass an output to the next layer's call."""
    if found.carried:
        position, name = next(iter(sorted(found.carried.items())))
        raise UnsupportedArchitectureError(
            f"{layers_path}: each decoder layer's output {position} is passed to the next layer as `{name}`; "
            "carrying layer outputs between layers is not supported (the loop replays every layer from its "
            "recorded inputs)"
        )
