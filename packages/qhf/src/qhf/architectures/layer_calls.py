"""Whether a model calls each decoder layer once per forward, probed on the discovery replica.

Layer-by-layer quantization calibrates each decoder layer once, from the inputs the model gives it in one
forward. A looped (recurrent-depth) model calls some layers more than once per forward: Dory runs its
recurrent block ``n_recurrent_loops`` times, each pass on the previous pass's output. Calibrating such a layer
from one of its calls would fit the other calls' inputs by chance, so the model is refused by name at
``qhf.load``, before calibration or any layer.

The probe runs the replica's forward on the discovery forward's inputs (``inputs_embeds [1, T, hidden]`` or token
ids) with every decoder layer replaced by qlooper's stand-in (:class:`qlooper.layer_kwargs.LayerCallRecorder`:
records the call, returns the hidden state unchanged, computes nothing, ends the forward at the last layer). The
replica's representative layers stand for several indices (the same object), so each index gets its own shallow copy
while the probe runs: the model still reads the layers' attributes (``attention_type``), and no parameter is copied.
Cost: one forward with no layer computation.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from qlooper.errors import CaptureError, StopForward
from qlooper.layer_kwargs import LayerCallRecorder
from torch import nn

from ..errors import UnsupportedArchitectureError
from .discovery_inputs import describe, embeds_inputs


def check_layers_run_once(
    replica: nn.Module, layers_path: str, embeds: torch.Tensor | dict[str, Any], output_arity: int | None
) -> None:
    """Raise :class:`UnsupportedArchitectureError` when a forward of ``replica`` calls a decoder layer twice.

    ``embeds`` ``[1, T, hidden]`` in the layers' dtype, or the forward's keyword arguments (token ids for a model
    discovery runs on ids: :mod:`qhf.architectures.discovery_inputs`); ``output_arity``: the layers' tuple length
    (None: they return a tensor), which the stand-ins return so the model unpacks them as it would the real layers.
    """
    inputs = embeds if isinstance(embeds, dict) else embeds_inputs(embeds)
    fed = describe(inputs)
    container = cast(nn.ModuleList, replica.get_submodule(layers_path))
    originals = list(container)
    copies = [copy.copy(layer) for layer in originals]
    try:
        for index, stand_in in enumerate(copies):
            container[index] = stand_in
        with torch.no_grad(), LayerCallRecorder(copies, lambda _name: False, output_arity):
            replica(**inputs)
    except StopForward:
        return
    except CaptureError as error:  # a layer index called a second time in the one forward
        raise UnsupportedArchitectureError(
            f"{layers_path}: {error} (checked at load on the discovery replica, before any work)"
        ) from error
    except Exception as error:  # the model's own forward: reported as not understood, like discovery's
        raise UnsupportedArchitectureError(
            f"{layers_path}: the layer-call probe forward (stand-in layers, {fed}) "
            f"failed: {type(error).__name__}: {error}"
        ) from error
    finally:
        for index, layer in enumerate(originals):
            container[index] = layer
    raise UnsupportedArchitectureError(
        f"{layers_path}: the layer-call probe forward finished without reaching the last decoder layer "
        f"({len(originals) - 1})"
    )
