"""Skeleton parameter names the source files store under another name or inside a fused tensor.

The skeleton's experts are unfused (:mod:`qhf.architectures.fused_experts`): ``mlp.experts.3.gate_proj.weight``.
Files store them either fused (``mlp.experts.gate_up_proj`` ``[E, ...]``, as GPT-OSS does), fused under a
name transformers renames when it loads (GraniteMoE's ``block_sparse_moe.input_linear.weight`` ->
``block_sparse_moe.experts.gate_up_proj``), or per expert under the names transformers converts from
(``block_sparse_moe.experts.3.w1.weight``); other
tensors may also be renamed by that conversion (``block_sparse_moe.gate`` -> ``mlp.gate``). A transformers
``Conv1D``'s weight, a linear of the skeleton, is stored transposed (:mod:`qhf.architectures.conv1d`). :func:`aliases`
maps each skeleton name the files lack to a reader, using transformers' own conversion mapping for the
model (``transformers.conversion_mapping``), so no family is spelled out here. Each :class:`Reader` names
the file tensors it reads, so a checkpoint writer can tell which file names the aliases replace without
reading (or guessing the shape of) any tensor.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from ..architectures.fused_experts import FusedSlice
from ..errors import SourceFormatError

Getter = Callable[[str], torch.Tensor]
"""The source's ``get(name) -> tensor`` over file names."""


@dataclass(frozen=True)
class Reader:
    """One skeleton tensor read from file tensor ``source``: ``reader(get)`` returns it (``where`` slices
    an expert's part out of a fused tensor; ``None``: the file tensor is the skeleton tensor, renamed;
    ``transposed``: the file stores the 2-D tensor transposed, a ``Conv1D``'s ``[in, out]`` weight)."""

    source: str
    where: FusedSlice | None = None
    transposed: bool = False

    def __call__(self, get: Getter) -> torch.Tensor:
        tensor = get(self.source)
        tensor = tensor if self.where is None else self.where.take(tensor)
        return tensor.t().contiguous() if self.transposed else tensor


def _conversions(model: nn.Module) -> tuple[list[Any], list[Any], Callable[..., Any]] | None:
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, rename_source_key
    except ImportError:  # transformers older than its conversion mapping: names are used as stored
        return None
    transforms = get_model_conversion_mapping(model)  # type: ignore[arg-type]  # any transformers model
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    return renamings, converters, rename_source_key


def _expert_of(file_name: str, pattern: str) -> int | None:
    regex = re.escape(pattern.lstrip("^")).replace(r"\*", r"(\d+)")
    found = re.search(regex, file_name)
    return int(found.group(1)) if found and found.groups() else None


def aliases(
    model: nn.Module,
    wanted: set[str],
    stored: frozenset[str],
    fused: dict[str, dict[str, FusedSlice]],
    transposed: frozenset[str] = frozenset(),
) -> dict[str, Reader]:
    """Skeleton name -> reader for every name in ``wanted`` that ``stored`` lacks but can provide, and for every
    name of ``transposed`` (stored transposed: :func:`qhf.architectures.conv1d.conv1d_weights`)."""
    found = _renamed(model, wanted, stored, fused)
    for name in sorted(transposed):
        if name in found:
            found[name] = replace(found[name], transposed=True)
        elif name in stored:
            found[name] = Reader(name, transposed=True)
    return found


def _renamed(
    model: nn.Module, wanted: set[str], stored: frozenset[str], fused: dict[str, dict[str, FusedSlice]]
) -> dict[str, Reader]:
    """Skeleton name -> reader for every name in ``wanted`` that ``stored`` lacks but can provide."""
    missing = {name for name in wanted if name not in stored}
    found: dict[str, Reader] = {}
    for module, slices in fused.items():  # fused in the files as in transformers' module
        for rel, where in slices.items():
            name, fused_name = f"{module}.{rel}", f"{module}.{where.fused_name}"
            if name in missing and fused_name in stored:
                found[name] = Reader(fused_name, where)
    conversions = _conversions(model)
    if conversions is None or not (missing - set(found)):
        return found
    renamings, converters, rename = conversions
    for file_name in sorted(stored):
        target, pattern = rename(file_name, renamings, converters)
        if pattern is None:
            if target in missing and target != file_name:
                found[target] = Reader(file_name)
            else:  # a fused experts tensor stored under another name (GraniteMoE's input_linear)
                module, _, fused_name = target.rpartition(".")
                for rel, where in fused.get(module, {}).items():
                    if where.fused_name == fused_name and f"{module}.{rel}" in missing:
                        found[f"{module}.{rel}"] = Reader(file_name, where)
            continue
        module, _, fused_name = target.rpartition(".")
        converter = next(c for c in converters if pattern in c.source_patterns)
        expert = _expert_of(file_name, pattern)
        if module not in fused or expert is None:
            raise SourceFormatError(
                f"tensor {file_name!r}: transformers converts it into {target!r} ({type(converter).__name__}), "
                "which only fused experts support here"
            )
        half = converter.source_patterns.index(pattern) if len(converter.source_patterns) > 1 else None
        for rel, where in fused[module].items():
            if (where.fused_name, where.expert, where.half, rel.endswith(".weight")) == (
                fused_name,
                expert,
                half,
                True,
            ):
                found[f"{module}.{rel}"] = Reader(file_name)
    return found
