"""First-layer input capture: run the model through stand-in decoder layers, record their calls, stop.

Every decoder layer's ``forward`` is replaced for the capture by a stand-in that records its call and
returns the hidden state unchanged (:mod:`qlooper.layer_kwargs`); layer 0's positional inputs and every
layer's keyword arguments are kept (layers that get the same kwargs share them: one variant per layer
type), tensors moved to the cache device; the last layer's stand-in raises
:class:`~qlooper.errors.StopForward`. Only that sentinel is swallowed, any other error from the model
propagates. No layer computes. ``InputCache.for_layer(i)`` gives the cache with layer ``i``'s kwargs.

KV-cache arguments (``past_key_values``, ``past_key_value``, ``layer_past``, ``use_cache``) are never
recorded: the captured kwargs are replayed once per layer and per step, and a recorded cache object would
grow on every replay and corrupt attention. While capturing, a model with a ``config.use_cache`` attribute
has it turned off (and restored afterwards) so no cache is built in the first place.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .calibration import CalibrationSet
from .errors import CaptureError, StopForward
from .input_cache import InputCache
from .layer_kwargs import LayerCallRecorder, batch_classes, variants_of

CACHE_KWARGS = frozenset({"past_key_values", "past_key_value", "layer_past", "use_cache"})
"""Layer keyword arguments that carry or request a KV cache; dropped from the captured kwargs."""


def to_device(
    value: Any, device: torch.device | None, memo: dict[int, Any] | None = None, *, dtype: torch.dtype | None = None
) -> Any:
    """``value`` with every tensor (in tuples, lists, dicts) detached and moved to ``device`` (None: where it
    is); with ``dtype``, floating-point tensors are also cast to it (integer and bool tensors keep theirs).

    With ``memo`` (object id -> moved value), an object met again is moved once and shared.
    """
    if memo is not None and id(value) in memo:
        return memo[id(value)]
    if isinstance(value, torch.Tensor):
        cast = dtype if dtype is not None and value.is_floating_point() else None
        moved: Any = value.detach().to(device=device, dtype=cast)
    elif isinstance(value, tuple):
        moved = tuple(to_device(v, device, memo, dtype=dtype) for v in value)
    elif isinstance(value, list):
        moved = [to_device(v, device, memo, dtype=dtype) for v in value]
    elif isinstance(value, dict):
        moved = {k: to_device(v, device, memo, dtype=dtype) for k, v in value.items()}
    else:
        return value
    if memo is not None:
        memo[id(value)] = moved
    return moved


def capture_first_layer_inputs(
    model: nn.Module,
    first_layer: nn.Module,
    calibration: CalibrationSet,
    *,
    device: str | torch.device = "cpu",
    layers: list[nn.Module] | None = None,
    output_arity: int | None = None,
) -> InputCache:
    """Call ``model(input_ids=, attention_mask=)`` per batch and record the layers' calls (module docstring).

    ``layers``: every decoder layer in order (``layers[0]`` is ``first_layer``); without it only layer 0's
    call is recorded and its kwargs serve every layer. ``output_arity``: the layers' tuple length
    (``ModelDefinition.layer_output_arity``; None: they return a tensor).
    """
    target = torch.device(device)
    layers = layers if layers is not None else [first_layer]
    if layers[0] is not first_layer:
        raise CaptureError("capture: layers[0] must be the first decoder layer")
    inputs: list[list[torch.Tensor]] = []
    moved: list[dict[int, dict[str, Any]]] = []  # per batch: class representative -> its moved kwargs
    classes: list[list[int]] = []
    masks: list[torch.Tensor] = []

    config = getattr(model, "config", None)
    had_use_cache = config is not None and hasattr(config, "use_cache")
    saved_use_cache = getattr(config, "use_cache", None)
    if config is not None and had_use_cache:
        config.use_cache = False
    try:
        with torch.no_grad(), LayerCallRecorder(layers, lambda k: k not in CACHE_KWARGS, output_arity) as recorder:
            for index, batch in enumerate(calibration.batches):
                recorder.reset()
                try:
                    model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
                except StopForward:
                    pass
                missing = [i for i, call in enumerate(recorder.calls) if call is None]
                if missing:
                    raise CaptureError(
                        f"calibration batch {index}: the model forward finished without reaching "
                        f"{'the first decoder layer' if missing[0] == 0 else f'decoder layer {missing[0]}'}; "
                        "check ModelDefinition.layers_path"
                    )
                calls = [call for call in recorder.calls if call is not None]
                args = calls[0][0]
                if not args or not isinstance(args[0], torch.Tensor):
                    raise CaptureError(
                        "first decoder layer: expected the hidden state as the first positional argument"
                    )
                memo: dict[int, Any] = {}
                inputs.append([to_device(a, target, memo) for a in args])
                classes.append(batch_classes([kw for _, kw in calls]))
                moved.append({c: to_device(calls[c][1], target, memo) for c in sorted(set(classes[-1]))})
                masks.append(batch.attention_mask.to(torch.bool).to(target))
    finally:
        if config is not None and had_use_cache:
            config.use_cache = saved_use_cache
    layer_variant, representatives = variants_of(classes)
    variants = [[moved[b][rep[b]] for b in range(len(moved))] for rep in representatives]
    if len(variants) <= 1:
        return InputCache(inputs, variants[0] if variants else [], masks)
    return InputCache(inputs, variants[layer_variant[0]], masks, variants, layer_variant)
