"""A source opened for quantization: config, model definition, meta skeleton and lazy tensor access.

``tensor(name)`` resolves names the files may lack on purpose: a tied output projection reads the input
embedding's tensor. Weights become real only through :meth:`OpenedSource.materialize_layer` /
:meth:`materialize_base` (or :meth:`materialize_all` for dense evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..architectures import ArchitectureDefinition, definition_for
from ..errors import SourceFormatError
from .skeleton import materialize, materialize_names, meta_parameters, release, release_outside, tied_output

TensorGetter = Callable[[str, "torch.dtype | None"], torch.Tensor]


@dataclass
class OpenedSource:
    """``kind``: ``"hf"`` or ``"gguf"``; ``path``: what was opened; ``get``: name, dtype -> CPU tensor.

    ``names``: every tensor name the source holds; ``model``: the skeleton (parameters on meta until
    materialized); ``dtype``: the compute dtype the weights are cast to.
    """

    kind: str
    path: Path
    config: Any
    definition: ArchitectureDefinition
    model: nn.Module
    names: frozenset[str]
    get: TensorGetter
    dtype: torch.dtype = torch.float32
    extra_files: dict[str, Path] = field(default_factory=dict)
    size_of: Callable[[str], int] | None = None
    dtype_of: Callable[[str], torch.dtype] | None = None

    def __post_init__(self) -> None:
        self.tied = tied_output(self.config)
        expected = {n for n, _ in self.model.named_parameters()}
        lm_head_weight = f"{self.definition.lm_head}.weight"
        absent = sorted(n for n in expected if n not in self.names and not (self.tied and n == lm_head_weight))
        if absent:
            shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
            raise SourceFormatError(f"{self.path}: the weights lack {len(absent)} tensor(s) the model needs: {shown}")

    @property
    def num_layers(self) -> int:
        return len(self.model.get_submodule(self.definition.layers_path))

    def tensor(self, name: str) -> torch.Tensor:
        """The source's tensor ``name`` in the compute dtype (a tied lm_head reads the embedding)."""
        if name not in self.names and self.tied and name == f"{self.definition.lm_head}.weight":
            name = f"{self.definition.base_modules[0]}.weight"
        return self.get(name, self.dtype)

    def stored(self, name: str) -> torch.Tensor:
        """Tensor ``name`` exactly as stored in the source (its file dtype)."""
        return self.get(name, None)

    def stored_nbytes(self, name: str) -> int:
        """Bytes of tensor ``name`` as stored (from the file header when the source can tell)."""
        if self.size_of is not None:
            return self.size_of(name)
        tensor = self.stored(name)
        return tensor.numel() * tensor.element_size()

    def stored_dtype(self, name: str) -> torch.dtype:
        """The dtype tensor ``name`` is stored in (from the file header when the source can tell)."""
        if self.dtype_of is not None:
            return self.dtype_of(name)
        return self.stored(name).dtype

    def _retie(self) -> None:
        if not self.tied:
            return
        head = self.model.get_submodule(self.definition.lm_head)
        embed = self.model.get_submodule(self.definition.base_modules[0])
        if embed.weight.device.type != "meta":
            head.weight = embed.weight

    def materialize_base(self) -> int:
        """Materialize everything outside the decoder layers (embeddings, final norm, lm_head)."""
        layers = self.definition.layers_path + "."
        lm_head_weight = f"{self.definition.lm_head}.weight"
        names = [
            n
            for n, p in self.model.named_parameters()
            if p.device.type == "meta" and not n.startswith(layers) and not (self.tied and n == lm_head_weight)
        ]
        loaded = materialize_names(self.model, names, self.tensor, self.dtype)
        self._retie()
        return loaded

    def release_base(self) -> None:
        """Send everything outside the decoder layers back to meta (the layer loop needs it only to capture
        the first layer's inputs); :meth:`materialize_base` reads it again."""
        release_outside(self.model, self.definition.layers_path)

    def materialize_layer(self, index: int) -> int:
        """Materialize decoder layer ``index``; returns bytes loaded."""
        return materialize(self.model, self.definition.layer_prefix(index), self.tensor, self.dtype)

    def release_layer(self, index: int) -> None:
        release(self.model, self.definition.layer_prefix(index))

    def materialize_all(self) -> nn.Module:
        """The whole dense model in memory (for baselines and dense export)."""
        self.materialize_base()
        for index in range(self.num_layers):
            self.materialize_layer(index)
        left = meta_parameters(self.model)
        if left:
            raise SourceFormatError(f"{self.path}: parameters left unloaded: {', '.join(left[:5])}")
        return self.model


def open_source_model(
    kind: str,
    path: Path,
    config: Any,
    names: frozenset[str],
    get: TensorGetter,
    dtype: torch.dtype,
    extra_files: dict[str, Path] | None = None,
    size_of: Callable[[str], int] | None = None,
    dtype_of: Callable[[str], torch.dtype] | None = None,
) -> OpenedSource:
    """Choose the definition from ``config.model_type``, build the meta skeleton, check tensor names."""
    from .skeleton import meta_skeleton

    definition = definition_for(config)
    model = meta_skeleton(config, dtype)
    return OpenedSource(
        kind=kind,
        path=path,
        config=config,
        definition=definition,
        model=model,
        names=names,
        get=get,
        dtype=dtype,
        extra_files=dict(extra_files or {}),
        size_of=size_of,
        dtype_of=dtype_of,
    )
