"""First-layer input capture: run the model until the first decoder layer, record its call, stop.

A forward pre-hook (with kwargs) on layer 0 records the positional inputs and keyword arguments,
moves tensors to the cache device, and raises :class:`~qlooper.errors.StopForward`; only that
sentinel is swallowed, any other error from the model propagates.

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

CACHE_KWARGS = frozenset({"past_key_values", "past_key_value", "layer_past", "use_cache"})
"""Layer keyword arguments that carry or request a KV cache; dropped from the captured kwargs."""


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor (in tuples, lists, dicts) detached and moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def capture_first_layer_inputs(
    model: nn.Module, first_layer: nn.Module, calibration: CalibrationSet, *, device: str | torch.device = "cpu"
) -> InputCache:
    """Call ``model(input_ids=, attention_mask=)`` per batch and record layer 0's call (see module docstring)."""
    target = torch.device(device)
    inputs: list[list[torch.Tensor]] = []
    kwargs: list[dict[str, Any]] = []
    masks: list[torch.Tensor] = []
    seen: list[bool] = []

    def hook(_module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if not args or not isinstance(args[0], torch.Tensor):
            raise CaptureError("first decoder layer: expected the hidden state as the first positional argument")
        inputs.append([to_device(a, target) for a in args])
        kwargs.append({k: to_device(v, target) for k, v in kw.items() if k not in CACHE_KWARGS})
        seen.append(True)
        raise StopForward("first-layer inputs captured")

    config = getattr(model, "config", None)
    had_use_cache = config is not None and hasattr(config, "use_cache")
    saved_use_cache = getattr(config, "use_cache", None)
    if had_use_cache:
        config.use_cache = False
    handle = first_layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            for index, batch in enumerate(calibration.batches):
                before = len(seen)
                try:
                    model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
                except StopForward:
                    pass
                if len(seen) != before + 1:
                    raise CaptureError(
                        f"calibration batch {index}: the model forward finished without reaching the first decoder "
                        "layer; check ModelDefinition.layers_path"
                    )
                masks.append(batch.attention_mask.to(torch.bool).to(target))
    finally:
        handle.remove()
        if had_use_cache:
            config.use_cache = saved_use_cache
    return InputCache(inputs, kwargs, masks)
