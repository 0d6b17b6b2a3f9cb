"""The loop's layer-loading hook: a caller's object that makes a decoder layer's weights real before the loop
works on the layer and may release them once the layer is finished.

:class:`LayerLoader` (``LoopOptions.layer_loader``) is called by the loop, for each layer it processes, in plan
order:

* ``load(index, name, layer)`` first, before the layer's groups are bound to its modules, before
  ``processor.start_layer``, the executor's ``begin_layer`` and any capture forward or solve. Loading
  parameters in place (same module objects) is what the loop expects: it binds the groups right after.
* ``release(index, name, layer)`` once the layer is finished: its groups processed, ``processor.end_layer``
  run, the replay that gives the next layer's inputs done, and every finalizer of its modules (pack, offload,
  replace; they read the dense module's bias) done. The loop checks after each layer and releases, in layer
  order, the leading finished ones; the layers still finalizing are released when the run has waited for
  them. Several layers may so be loaded at once while their finalizers run.

Layers before a resume cursor are neither loaded nor released; a layer that fails, or whose finalizers fail,
is not released. An exception from either call stops the loop as a :class:`~qlooper.errors.LayerLoadError`
naming the layer and the call, chained to the loader's own error.
"""

from __future__ import annotations

from typing import Literal, Protocol

from torch import nn

from .errors import LayerLoadError


class LayerLoader(Protocol):
    """Loads a decoder layer's weights before the loop works on it and releases them after (module docstring).

    ``index``: the layer's position in the plan (0-based); ``name``: its dotted name in the model
    (``"model.layers.3"``); ``layer``: the layer module itself.
    """

    def load(self, index: int, name: str, layer: nn.Module) -> None: ...

    def release(self, index: int, name: str, layer: nn.Module) -> None: ...


def call_loader(loader: LayerLoader, call: Literal["load", "release"], index: int, name: str, layer: nn.Module) -> None:
    """``loader.load(...)`` or ``loader.release(...)`` (``call``); its exception becomes a
    :class:`LayerLoadError` naming the layer and the call."""
    method = loader.load if call == "load" else loader.release
    try:
        method(index, name, layer)
    except Exception as error:
        raise LayerLoadError(
            f"layer {name} (index {index}): the layer loader's {call} failed: {type(error).__name__}: {error}"
        ) from error
