"""A source opened for quantization: config, discovered definition, meta skeleton and lazy tensor access.

``tensor(name)`` resolves names the files may lack on purpose: a tied output projection reads the input
embedding's tensor, and unfused experts or renamed modules read their file tensors
(:mod:`qhf.source.tensor_aliases`). Weights become real only through :meth:`OpenedSource.materialize_layer` /
:meth:`materialize_base` (or :meth:`materialize_all` for dense evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from qlooper.definition import ModelDefinition
from torch import nn

from ..architectures import Discovery, definition_for
from ..errors import SourceFormatError
from .skeleton import (
    embedding_names,
    fused_expert_slices,
    materialize,
    materialize_names,
    meta_parameters,
    release,
    release_outside,
    tied_output,
)
from .tensor_aliases import Reader, aliases

TensorGetter = Callable[[str, "torch.dtype | None"], torch.Tensor]


@dataclass
class OpenedSource:
    """``kind``: ``"hf"`` or ``"gguf"``; ``path``: what was opened; ``get``: name, dtype -> CPU tensor.

    ``names``: every tensor name the files hold; ``model``: the skeleton (parameters on meta until
    materialized, experts unfused); ``dtype``: the compute dtype the weights are cast to; ``discovery``:
    how the definition was found; ``aliases``: skeleton names read from other file tensors.
    """

    kind: str
    path: Path
    config: Any
    discovery: Discovery
    model: nn.Module
    names: frozenset[str]
    get: TensorGetter
    dtype: torch.dtype = torch.float32
    extra_files: dict[str, Path] = field(default_factory=dict)
    size_of: Callable[[str], int] | None = None
    dtype_of: Callable[[str], torch.dtype] | None = None
    aliases: dict[str, Reader] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tied = tied_output(self.config, self.model)
        self.embed_weight, self.head_weight = embedding_names(self.model)
        expected = {n for n, _ in self.model.named_parameters()}
        absent = sorted(
            n
            for n in expected
            if n not in self.names and n not in self.aliases and not (self.tied and n == self.head_weight)
        )
        if absent:
            shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
            raise SourceFormatError(f"{self.path}: the weights lack {len(absent)} tensor(s) the model needs: {shown}")

    @property
    def definition(self) -> ModelDefinition:
        """The qlooper definition the loop runs (discovered, with the family's override)."""
        return self.discovery.definition

    def layer_prefix(self, index: int) -> str:
        """Dotted prefix of decoder layer ``index`` (``model.layers.3``)."""
        return f"{self.definition.layers_path}.{index}"

    def tensor_names(self) -> list[str]:
        """Every tensor name as the skeleton spells it (file tensors read through an alias replaced by it)."""
        read = {reader.source for reader in self.aliases.values()}
        return sorted((set(self.names) - read) | set(self.aliases))

    @property
    def num_layers(self) -> int:
        return len(cast(nn.ModuleList, self.model.get_submodule(self.definition.layers_path)))

    def tensor(self, name: str) -> torch.Tensor:
        """The source's tensor ``name`` in the compute dtype (a tied lm_head reads the embedding)."""
        if name in self.aliases:
            return self.aliases[name](lambda n: self.get(n, self.dtype))
        if name not in self.names and self.tied and name == self.head_weight:
            name = self.embed_weight
        return self.get(name, self.dtype)

    def stored(self, name: str) -> torch.Tensor:
        """Tensor ``name`` exactly as stored in the source (its file dtype)."""
        if name in self.aliases:
            return self.aliases[name](lambda n: self.get(n, None))
        return self.get(name, None)

    def stored_nbytes(self, name: str) -> int:
        """Bytes of tensor ``name`` as stored (from the file header when the source can tell)."""
        if self.size_of is not None and name not in self.aliases:
            return self.size_of(name)
        tensor = self.stored(name)
        return tensor.numel() * tensor.element_size()

    def stored_dtype(self, name: str) -> torch.dtype:
        """The dtype tensor ``name`` is stored in (from the file header when the source can tell)."""
        if self.dtype_of is not None and name not in self.aliases:
            return self.dtype_of(name)
        return self.stored(name).dtype

    def _retie(self) -> None:
        if not self.tied:
            return
        head = self.model.get_submodule(self.head_weight.rsplit(".", 1)[0])
        embed = self.model.get_submodule(self.embed_weight.rsplit(".", 1)[0])
        if embed.weight.device.type != "meta":
            head.weight = embed.weight

    def materialize_base(self) -> int:
        """Materialize everything outside the decoder layers (embeddings, final norm, lm_head)."""
        layers = self.definition.layers_path + "."
        lm_head_weight = self.head_weight
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
        return materialize(self.model, self.layer_prefix(index), self.tensor, self.dtype)

    def release_layer(self, index: int) -> None:
        release(self.model, self.layer_prefix(index))

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
    """Build the meta skeleton (experts unfused), discover its definition, check tensor names."""
    from .skeleton import meta_skeleton

    model = meta_skeleton(config, dtype)
    discovery = definition_for(model, config)
    wanted = {n for n, _ in model.named_parameters()}
    return OpenedSource(
        kind=kind,
        path=path,
        config=config,
        discovery=discovery,
        model=model,
        names=names,
        get=get,
        dtype=dtype,
        extra_files=dict(extra_files or {}),
        size_of=size_of,
        dtype_of=dtype_of,
        aliases=aliases(model, wanted, names, fused_expert_slices(model)),
    )
