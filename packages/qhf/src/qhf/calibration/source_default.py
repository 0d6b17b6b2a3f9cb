"""The default calibration for an opened (lazy) source: load the weights to sample, then unload them.

Sampling needs every decoder layer at once, while quantization reads one layer at a time. So when the
mixture has self-generated rows, the layers that were still on the meta device are materialized, the
model samples its rows, and those layers are sent back to meta before the layer loop starts: peak
memory during generation is the dense model in the compute dtype; during quantization it is what it
was without generation.
"""

from __future__ import annotations

from typing import Any

from ..source.opened_source import OpenedSource
from .mixture import DefaultCalibration, MixedCalibration, build_mixture


def _meta_layers(source: OpenedSource) -> list[int]:
    layers = source.model.get_submodule(source.definition.layers_path)
    return [i for i, layer in enumerate(layers.children()) if any(p.device.type == "meta" for p in layer.parameters())]


def default_calibration(
    source: OpenedSource, tokenizer: Any, config: DefaultCalibration, *, progress: bool = False
) -> MixedCalibration:
    """Build ``config`` (resolved) for ``source``; decoder layers loaded only for generation are released."""
    _, generated = config.split()
    if not generated:
        return build_mixture(None, tokenizer, config, progress=progress)
    lazy = _meta_layers(source)
    source.materialize_all()
    try:
        return build_mixture(source.model, tokenizer, config, progress=progress)
    finally:
        for index in lazy:
            source.release_layer(index)
