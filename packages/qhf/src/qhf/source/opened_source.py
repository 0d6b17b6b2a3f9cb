"""A source opened for quantization: config, discovered definition, meta skeleton and lazy tensor access.

``tensor(name)`` resolves names the files may lack on purpose: a tied output projection reads the input
embedding's tensor, and unfused experts or renamed modules read their file tensors
(:mod:`qhf.source.tensor_aliases`). Weights become real only through :meth:`OpenedSource.materialize_layer` /
:meth:`materialize_base` (or :meth:`materialize_all` for dense evaluation).

A :class:`TensorTransform` installed with :meth:`OpenedSource.install_transform` (rotations folded into the
weights, :mod:`qhf.rotation`) rewrites the tensors it names as they are read, one tensor at a time from the file
tensors in float64: every later read (materialization, spill, save, verify) sees the transformed model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import torch
from qlooper.definition import ModelDefinition
from torch import nn

from ..architectures import Discovery, definition_for
from ..architectures.conv1d import conv1d_weights
from ..errors import SourceFormatError
from .skeleton import (
    embedding_names,
    fused_expert_slices,
    load_buffers,
    materialize,
    materialize_names,
    meta_parameters,
    persistent_buffers,
    release,
    release_outside,
    tied_output,
)
from .tensor_aliases import AnyReader, Reader, aliases

TensorGetter = Callable[[str, "torch.dtype | None"], torch.Tensor]


class TensorTransform(Protocol):
    """Rewrites some of a source's tensors: ``name in transform`` says which; ``transform(name, read)`` returns
    the new float64 tensor, reading any file tensor it needs (by skeleton name, untransformed) with ``read``."""

    def __contains__(self, name: object) -> bool: ...

    def __call__(self, name: str, read: Callable[[str], torch.Tensor]) -> torch.Tensor: ...


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
    aliases: dict[str, AnyReader] = field(default_factory=dict)
    transform: TensorTransform | None = None

    def __post_init__(self) -> None:
        #: fused file tensors experts' slices were read from while a layer is materialized (:meth:`_fused_get`)
        self._fused: dict[tuple[str, torch.dtype | None], torch.Tensor] = {}
        self._keep_fused = False
        self.tied = tied_output(self.config, self.model)
        #: The output projection has no file tensor of its own (tied in the files); stays True once untied.
        self.head_reads_embedding = self.tied
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
        """Every tensor name as the skeleton spells it (file tensors read through an alias replaced by it; an
        untied output projection included)."""
        read = {source for reader in self.aliases.values() for source in reader.sources}
        untied = {self.head_weight} if self.head_reads_embedding and not self.tied else set()
        return sorted((set(self.names) - read) | set(self.aliases) | untied)

    @property
    def num_layers(self) -> int:
        return len(cast(nn.ModuleList, self.model.get_submodule(self.definition.layers_path)))

    def _file_name(self, name: str) -> str:
        """The file tensor behind skeleton name ``name`` (a tied lm_head's is the embedding's)."""
        if name not in self.names and self.head_reads_embedding and name == self.head_weight:
            return self.embed_weight
        return name

    def _read(self, name: str, dtype: torch.dtype | None) -> torch.Tensor:
        """Tensor ``name`` from the files (aliases and a tied lm_head resolved), untransformed, in ``dtype``."""
        reader = self.aliases.get(name)
        if reader is None:
            return self.get(self._file_name(name), dtype)
        if isinstance(reader, Reader) and reader.where is not None:  # one expert's slice of a fused file tensor
            return reader(lambda n: self._fused_get(n, dtype))
        return reader(lambda n: self.get(n, dtype))

    def _fused_get(self, name: str, dtype: torch.dtype | None) -> torch.Tensor:
        """File tensor ``name`` in ``dtype``, kept until the layer being materialized is complete: every expert of
        an MoE layer slices the same fused tensors (``gate_up_proj``, ``down_proj``), which were read from the
        files once per expert parameter before (384 reads of up to 805 MB per 30B-A3B layer); now once each, at
        the cost of holding them while the layer loads. The readers only slice them (:meth:`FusedSlice.take`
        copies), so they are never changed."""
        if not self._keep_fused:  # outside a layer's materialization nothing is kept
            return self.get(name, dtype)
        key = (name, dtype)
        if key not in self._fused:
            self._fused[key] = self.get(name, dtype)
        return self._fused[key]

    def _transformed(self, name: str) -> torch.Tensor | None:
        """The installed transform's float64 value of ``name``, or None when it leaves ``name`` alone."""
        if self.transform is None or name not in self.transform:
            return None
        return self.transform(name, lambda n: self._read(n, torch.float64))

    def tensor(self, name: str) -> torch.Tensor:
        """The source's tensor ``name`` in the compute dtype (a tied lm_head reads the embedding; the installed
        transform applied)."""
        changed = self._transformed(name)
        if changed is not None:
            return changed.to(self.dtype)
        return self._read(name, self.dtype)

    def stored(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as stored in the source (its file dtype; the installed transform applied)."""
        changed = self._transformed(name)
        if changed is not None:
            return changed.to(self.stored_dtype(name))
        return self._read(name, None)

    def stored_nbytes(self, name: str) -> int:
        """Bytes of tensor ``name`` as stored (from the file header when the source can tell)."""
        if self.size_of is not None and name not in self.aliases:
            return self.size_of(self._file_name(name))
        tensor = self._read(name, None)
        return tensor.numel() * tensor.element_size()

    def stored_dtype(self, name: str) -> torch.dtype:
        """The dtype tensor ``name`` is stored in (from the file header when the source can tell)."""
        if self.dtype_of is not None and name not in self.aliases:
            return self.dtype_of(self._file_name(name))
        return self._read(name, None).dtype

    def install_transform(self, transform: TensorTransform, *, untie: bool = False) -> None:
        """Read every later tensor through ``transform`` (module docstring). Every materialized parameter is sent
        back to meta first, so nothing read before stays. ``untie``: a tied output projection gets its own tensor
        (the transform gives it; it is saved under its own name) and the configs say ``tie_word_embeddings:
        false``."""
        release(self.model, "")
        self.transform = transform
        if not (untie and self.tied):
            return
        self.tied = False
        for config in {id(c): c for c in _tie_configs(self.config, cast(Any, self.model).config)}.values():
            config.tie_word_embeddings = False
        head_module, _, pname = self.head_weight.rpartition(".")
        head = self.model.get_submodule(head_module)
        old = head._parameters[pname]
        if old is not None:
            head._parameters[pname] = nn.Parameter(torch.empty_like(old, device="meta"), requires_grad=False)

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
        self._keep_fused = True
        try:
            return materialize(self.model, self.layer_prefix(index), self.tensor, self.dtype)
        finally:
            self._keep_fused = False
            self._fused.clear()

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


def _tie_configs(*configs: Any) -> list[Any]:
    """The configs (and their text configs) that carry ``tie_word_embeddings``."""
    found = []
    for config in configs:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        found += [c for c in (config, text) if hasattr(c, "tie_word_embeddings")]
    return found


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
    buffers = persistent_buffers(model)
    wanted = {n for n, _ in model.named_parameters()} | set(buffers)
    opened = OpenedSource(
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
        aliases=aliases(model, wanted, names, fused_expert_slices(model), conv1d_weights(model)),
    )
    # stored buffers (a router's correction bias) are read once: small, and never sent back to meta
    load_buffers(model, [n for n in buffers if n in names or n in opened.aliases], opened.stored)
    return opened
