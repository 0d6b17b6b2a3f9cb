"""Skeleton parameter names the source files store under another name, inside a fused tensor or split/merged.

The skeleton's experts are unfused (:mod:`qhf.architectures.fused_experts`): ``mlp.experts.3.gate_proj.weight``.
Files store them either fused (``mlp.experts.gate_up_proj`` ``[E, ...]``, as GPT-OSS does), fused under a
name transformers renames when it loads (GraniteMoE's ``block_sparse_moe.input_linear.weight`` ->
``block_sparse_moe.experts.gate_up_proj``), or per expert under the names transformers converts from
(``block_sparse_moe.experts.3.w1.weight``); other
tensors may also be renamed by that conversion (``block_sparse_moe.gate`` -> ``mlp.gate``). Other tensors are
built by one of transformers' ``WeightConverter`` s from one or more file tensors: a fused ``query_key_value``
split into ``q_proj`` / ``k_proj`` / ``v_proj`` (Sarvam-MoE), ``q_conv1d`` / ``k_conv1d`` / ``v_conv1d``
concatenated into one ``conv1d`` (Kimi Linear), fused experts interleaved (Inkling 2): :class:`Converted` runs
that converter's own operations (``Split``, ``Concatenate``, ``Interleave`` ...) on the file tensors, exactly as
``from_pretrained`` does, and gives the target the skeleton asks for (or an expert's slice of it). A
transformers ``Conv1D``'s weight, a linear of the skeleton, is stored transposed (:mod:`qhf.architectures.conv1d`).

:func:`aliases` maps each skeleton name the files lack to a reader, using transformers' own conversion mapping
for the model (``transformers.conversion_mapping``), so no family is spelled out here. Each reader names the file
tensors it reads (``sources``), so a checkpoint writer can tell which file names the aliases replace without
reading (or guessing the shape of) any tensor.
"""

from __future__ import annotations

import copy
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

    @property
    def sources(self) -> tuple[str, ...]:
        """The file tensors this reader reads."""
        return (self.source,)

    def __call__(self, get: Getter) -> torch.Tensor:
        tensor = get(self.source)
        tensor = tensor if self.where is None else self.where.take(tensor)
        return tensor.t().contiguous() if self.transposed else tensor


@dataclass(frozen=True, eq=False)
class Conversion:
    """One application of a transformers ``WeightConverter``: the file tensors ``inputs`` (``(source pattern,
    file name)``, in file order) become the tensors named ``layer_name`` (the converter's first target, as
    ``from_pretrained`` names it) and its sibling targets. ``model``: the skeleton (``Split`` reads each
    target's size from it); ``config``: the model's config."""

    converter: Any  # transformers.core_model_loading.WeightConverter
    layer_name: str
    inputs: tuple[tuple[str, str], ...]
    model: nn.Module
    config: Any

    def targets(self) -> list[str]:
        """Full names of every tensor the conversion produces (the first target's name with each target
        pattern in its place)."""
        first = self.converter.target_patterns[0]
        return [self.layer_name.replace(first, target, 1) for target in self.converter.target_patterns]

    def run(self, get: Getter) -> dict[str, torch.Tensor]:
        """Every target, full name -> tensor, computed by the converter's own operations from the file tensors
        read with ``get``; a result of another floating dtype than the inputs' is cast back to theirs."""
        converter = copy.deepcopy(self.converter)  # a converter consumes the tensors it collected
        dtypes = set()
        for pattern, file_name in self.inputs:

            def read(name: str = file_name) -> torch.Tensor:
                tensor = get(name)
                dtypes.add(tensor.dtype)
                return tensor

            converter.add_tensor(self.layer_name, file_name, pattern, read)
        try:
            produced = converter.convert(self.layer_name, model=self.model, config=self.config)
        except Exception as error:  # a conversion transformers' own loader would fail on too
            raise SourceFormatError(
                f"tensors {[f for _, f in self.inputs]}: transformers' {type(self.converter).__name__} "
                f"({', '.join(type(op).__name__ for op in self.converter.operations)}) into {self.targets()} "
                f"failed: {type(error).__name__}: {error}"
            ) from error
        dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
        out = {}
        for name, tensor in produced.items():
            tensor = tensor[0] if isinstance(tensor, list) else tensor
            if dtype is not None and tensor.dtype != dtype and tensor.is_floating_point() and dtype.is_floating_point:
                tensor = tensor.to(dtype)
            out[name] = tensor
        return out


@dataclass(frozen=True)
class Converted:
    """One skeleton tensor built by a :class:`Conversion`: its ``target`` (a full name the conversion
    produces), then ``where`` (an expert's part of a fused target; ``None``: the whole target)."""

    conversion: Conversion
    target: str
    where: FusedSlice | None = None

    @property
    def sources(self) -> tuple[str, ...]:
        """The file tensors the conversion reads."""
        return tuple(file_name for _, file_name in self.conversion.inputs)

    def __call__(self, get: Getter) -> torch.Tensor:
        produced = self.conversion.run(get)
        if self.target not in produced:
            raise SourceFormatError(
                f"tensors {list(self.sources)}: transformers' conversion gave {sorted(produced)}, not {self.target!r}"
            )
        tensor = produced[self.target]
        return tensor if self.where is None else self.where.take(tensor)


AnyReader = Reader | Converted
"""What :func:`aliases` maps a skeleton name to; both name their file tensors (``sources``) and are called
with the source's getter."""


def _conversions(model: nn.Module) -> tuple[list[Any], list[Any], Callable[..., Any], Callable[[str], Any]] | None:
    """transformers' renamings and converters for ``model``, its key renaming function and the order it reads
    file tensors in (numbers numerically: ``experts.10`` after ``experts.9``, as a converter's lists need)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, dot_natural_key, rename_source_key
    except ImportError:  # transformers older than its conversion mapping: names are used as stored
        return None
    transforms = get_model_conversion_mapping(model)  # type: ignore[arg-type]  # any transformers model
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    return renamings, converters, rename_source_key, dot_natural_key


def _expert_of(file_name: str, pattern: str) -> int | None:
    regex = re.escape(pattern.lstrip("^")).replace(r"\*", r"(\d+)")
    found = re.search(regex, file_name)
    return int(found.group(1)) if found and found.groups() else None


def _claim(conversion: Conversion, missing: set[str], fused: dict[str, dict[str, FusedSlice]]) -> dict[str, Converted]:
    """The skeleton names ``conversion`` provides: a target the skeleton has, or the unfused experts' slices of a
    fused target."""
    found: dict[str, Converted] = {}
    for target in conversion.targets():
        if target in missing:
            found[target] = Converted(conversion, target)
            continue
        module, _, fused_name = target.rpartition(".")
        for rel, where in fused.get(module, {}).items():
            if where.fused_name == fused_name and f"{module}.{rel}" in missing:
                found[f"{module}.{rel}"] = Converted(conversion, target, where)
    return found


def aliases(
    model: nn.Module,
    wanted: set[str],
    stored: frozenset[str],
    fused: dict[str, dict[str, FusedSlice]],
    transposed: frozenset[str] = frozenset(),
) -> dict[str, AnyReader]:
    """Skeleton name -> reader for every name in ``wanted`` that ``stored`` lacks but can provide, and for every
    name of ``transposed`` (stored transposed: :func:`qhf.architectures.conv1d.conv1d_weights`)."""
    found = _renamed(model, wanted, stored, fused)
    for name in sorted(transposed):
        reader = found.get(name)
        if isinstance(reader, Converted):
            raise SourceFormatError(
                f"tensor {name!r}: a Conv1D weight (stored transposed) that transformers also converts from "
                f"{list(reader.sources)}; reading both is not supported"
            )
        if reader is not None:
            found[name] = replace(reader, transposed=True)
        elif name in stored:
            found[name] = Reader(name, transposed=True)
    return found


def _renamed(
    model: nn.Module, wanted: set[str], stored: frozenset[str], fused: dict[str, dict[str, FusedSlice]]
) -> dict[str, AnyReader]:
    """Skeleton name -> reader for every name in ``wanted`` that ``stored`` lacks but can provide."""
    missing = {name for name in wanted if name not in stored}
    found: dict[str, AnyReader] = {}
    for module, slices in fused.items():  # fused in the files as in transformers' module
        for rel, where in slices.items():
            name, fused_name = f"{module}.{rel}", f"{module}.{where.fused_name}"
            if name in missing and fused_name in stored:
                found[name] = Reader(fused_name, where)
    conversions = _conversions(model)
    if conversions is None or not (missing - set(found)):
        return found
    renamings, converters, rename, order = conversions
    groups: dict[tuple[int, str], list[tuple[str, str]]] = {}  # (converter, first target) -> its file tensors
    for file_name in sorted(stored, key=order):
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
        index = next(i for i, c in enumerate(converters) if pattern in c.source_patterns)
        module, _, fused_name = target.rpartition(".")
        expert = _expert_of(file_name, pattern)
        if module in fused and expert is not None:  # one expert's tensor of experts transformers fuses
            converter = converters[index]
            half = converter.source_patterns.index(pattern) if len(converter.source_patterns) > 1 else None
            for rel, where in fused[module].items():
                if (where.fused_name, where.expert, where.half, rel.endswith(".weight")) == (
                    fused_name,
                    expert,
                    half,
                    True,
                ):
                    found[f"{module}.{rel}"] = Reader(file_name)
            continue
        groups.setdefault((index, target), []).append((pattern, file_name))
    config = getattr(model, "config", None)
    for (index, layer_name), inputs in groups.items():
        conversion = Conversion(converters[index], layer_name, tuple(inputs), model, config)
        claimed = _claim(conversion, missing, fused)
        if not claimed and not any(t in wanted for t in conversion.targets()):
            raise SourceFormatError(
                f"tensor {inputs[0][1]!r}: transformers converts it into {conversion.targets()} "
                f"({type(converters[index]).__name__}), which the model does not have"
            )
        found.update(claimed)
    return found
