"""Probe logits of a streaming run without the whole quantized model in memory (verify-after-save's check 3).

Expected: the source skeleton (modules outside the decoder layers in memory), each layer filled from the
spill area just before its forward: its quantized modules built by the run's replacer from the spilled packed
tensors and logical weight (what the in-memory run would have installed), its other tensors read from the
spill rounded to the checkpoint's dense dtype (as ``save`` rounds an in-memory model). Reloaded: a skeleton
built from the saved directory with its decoder layers on meta (``build_quantized_model(skip_prefix=)``),
each layer filled from the saved files. Both run through :func:`qhf.layerwise.layerwise_logits`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from qlooper.finalize import FinalizedModule
from qlooper.module_access import linear_features
from torch import nn

from .architectures.conv1d import conv1d_weights, skeleton_layout
from .checkpoint_reader import QuantizedCheckpoint
from .layerwise import LayerSwap, layerwise_logits
from .results import QuantizedModules
from .source.opened_source import OpenedSource
from .source.skeleton import materialize
from .spill import SpillArea

Replacer = Callable[[str, nn.Module, FinalizedModule], "nn.Module | None"]


def spilled_logits(
    source: OpenedSource,
    results: QuantizedModules,
    spill: SpillArea,
    replacer: Replacer,
    dense_dtype: torch.dtype | None,
    ids: torch.Tensor,
) -> torch.Tensor:
    """float32 logits ``[1, tokens, vocab]`` of the quantized model as the streaming run left it (module docstring)."""
    model = source.model

    def dense(name: str) -> torch.Tensor:
        value = spill.dense(name)
        if value is None:
            value = source.tensor(name)
        if dense_dtype is not None and value.is_floating_point():
            value = value.to(dense_dtype).to(value.dtype)
        return value

    def fill(prefix: str, swap: LayerSwap) -> None:
        for name, result in results.items():
            if not name.startswith(prefix + "."):
                continue
            tensors, bias = result.tensors(), result.bias_array()
            loaded = FinalizedModule(name, result.format, result.logical(), tensors, bias)
            new = replacer(name, model.get_submodule(name), loaded)
            if new is not None:
                swap.install(name[len(prefix) + 1 :], new)
        materialize(model, prefix, dense, source.dtype)

    return layerwise_logits(model, source.definition.layers_path, fill, ids)


def reloaded_logits(
    checkpoint: QuantizedCheckpoint,
    layers_path: str,
    dtype: torch.dtype,
    shared: Callable[[str], torch.Tensor | None],
    ids: torch.Tensor,
    backends: dict[str, int],
) -> torch.Tensor:
    """float32 logits ``[1, tokens, vocab]`` of the saved checkpoint, one decoder layer in memory at a time;
    counts each quantized module's backend into ``backends``."""
    from .load_quantized import build_quantized_model

    model, _ = build_quantized_model(checkpoint, dtype=dtype, shared=shared, skip_prefix=layers_path + ".")
    transposed = conv1d_weights(model)  # a dense Conv1D's weight: [in, out] in the file, [out, in] in the model

    def fill(prefix: str, swap: LayerSwap) -> None:
        for rel, module in list(swap.layer.named_modules()):
            full = f"{prefix}.{rel}"
            if rel and isinstance(module, nn.Linear) and checkpoint.is_quantized(full):
                built: Any = checkpoint.build_module(full, *linear_features(module), backend="auto", dtype=dtype)
                swap.install(rel, built)
                selection = getattr(built, "selection", None)
                backend = str(getattr(selection, "backend", type(built).__name__))
                backends[backend] = backends.get(backend, 0) + 1
        materialize(
            model, prefix, lambda name: skeleton_layout(name, checkpoint.reader.get(name, dtype), transposed), dtype
        )

    return layerwise_logits(model, layers_path, fill, ids)
