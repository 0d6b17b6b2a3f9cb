"""Model definitions as data: where the decoder layers are and how each layer is quantized.

A :class:`ModelDefinition` names the dotted path of the decoder-layer container and, for one layer,
the ordered calculation groups. Nothing here looks at class names: modules are found by their dotted
names and a quantizable module is anything with a 2-D ``weight`` ``[out, in]`` used as ``x @ W.T + b``.

MoE experts are written with the wildcard ``#`` standing for the expert index, e.g.
``"mlp.experts.#.gate_proj"``; the wildcard expands to every numbered child present in the layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .errors import DefinitionError

EXPERT_WILDCARD = "#"


@dataclass(frozen=True)
class GroupSpec:
    """One calculation group of a layer, quantized together after one capture forward.

    * ``modules``: dotted names relative to the layer, in forward order (``("self_attn.q_proj", ...)``).
    * ``shared_input``: the modules read one and the same input, so statistics are collected once
      (per expert when the names hold the ``#`` wildcard). Default (None): ``True`` when the group names
      several modules, ``False`` for one (a lone module reads its own input either way); set in
      ``__post_init__``, so a built spec always holds a bool.
    * ``prev_op``: the op whose output feeds the group (a norm or linear), into which AWQ folds its
      scales; ``None`` when there is none (AWQ then skips the scale search and records it).
    * ``inspect``: the module whose output AWQ compares when searching scales (``"self_attn"`` for
      q/k/v); ``None`` compares the group's own outputs.
    * ``optional``: the group may be absent from a layer (skipped, recorded) instead of an error.
    """

    modules: tuple[str, ...]
    shared_input: bool | None = None
    prev_op: str | None = None
    inspect: str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if not self.modules:
            raise DefinitionError("GroupSpec.modules: expected at least one module name, found none")
        if len(set(self.modules)) != len(self.modules):
            raise DefinitionError(f"GroupSpec.modules: duplicate names in {list(self.modules)}")
        if self.shared_input is None:
            object.__setattr__(self, "shared_input", len(self.modules) > 1)  # frozen: the one place it is set

    @property
    def is_expert_group(self) -> bool:
        return any(EXPERT_WILDCARD in part.split(".") for part in self.modules)


@dataclass(frozen=True)
class ModelDefinition:
    """How to walk one model family.

    * ``layers_path``: dotted path of the decoder-layer container (``"model.layers"``).
    * ``groups``: the calculation groups of a layer, in execution order (``[q,k,v], [o], [gate,up], [down]``).
    * ``unquantized``: modules that run but are never quantized (norms); checked to exist.
    * ``max_length``: the model's maximum sequence length in tokens (calibration rows are trimmed to it).
    * ``awq_no_clip``: module names (relative to the layer) that AWQ never clip-searches (q/k projections).
    * ``norm_weight_offset``: norms compute ``x * (offset + weight)`` (1.0 for Gemma); AWQ folds its scales
      into ``offset + weight`` of a 1-D ``prev_op`` weight.
    * ``name``: a label for reports and checkpoint identity.
    * ``layer_output_arity``: how a decoder layer returns: ``None`` a hidden-state tensor, ``n`` a tuple of ``n``
      whose first element is the hidden state (the model's code unpacks ``n`` values; the capture's stand-in
      layers return ``(hidden, None, ...)``). Not part of :meth:`describe`: it changes no number.
    """

    layers_path: str
    groups: tuple[GroupSpec, ...]
    unquantized: tuple[str, ...] = ()
    max_length: int | None = None
    awq_no_clip: tuple[str, ...] = ()
    norm_weight_offset: float = 0.0
    name: str = "custom"
    layer_output_arity: int | None = None

    def __post_init__(self) -> None:
        if not self.layers_path:
            raise DefinitionError("ModelDefinition.layers_path: expected a dotted path such as 'model.layers'")
        if not self.groups:
            raise DefinitionError("ModelDefinition.groups: expected at least one calculation group")
        seen: set[str] = set()
        for group in self.groups:
            for name in group.modules:
                if name in seen:
                    raise DefinitionError(f"ModelDefinition.groups: module {name!r} appears in two groups")
                seen.add(name)
        if self.layer_output_arity is not None and self.layer_output_arity < 1:
            raise DefinitionError(
                "ModelDefinition.layer_output_arity: expected None or a positive integer, "
                f"found {self.layer_output_arity}"
            )
        if self.max_length is not None and self.max_length <= 0:
            raise DefinitionError(f"ModelDefinition.max_length: expected a positive integer, found {self.max_length}")

    def describe(self) -> dict[str, object]:
        """A JSON-able description (used in checkpoint identity)."""
        return {
            "name": self.name,
            "layers_path": self.layers_path,
            "groups": [
                {
                    "modules": list(g.modules),
                    "shared_input": g.shared_input,
                    "prev_op": g.prev_op,
                    "inspect": g.inspect,
                    "optional": g.optional,
                }
                for g in self.groups
            ],
            "unquantized": list(self.unquantized),
            "max_length": self.max_length,
            "awq_no_clip": list(self.awq_no_clip),
            "norm_weight_offset": self.norm_weight_offset,
        }


@dataclass
class ResolvedModule:
    """A quantizable module of one layer: relative and full names, the module, its expert index."""

    name: str
    full_name: str
    module: nn.Module
    expert: int | None = None
    input_key: str = ""  # modules of one group with the same key read the same input

    @property
    def weight(self) -> torch.Tensor:
        return self.module.weight  # type: ignore[return-value]


@dataclass
class ResolvedGroup:
    """A :class:`GroupSpec` bound to one layer's modules."""

    index: int
    spec: GroupSpec
    modules: list[ResolvedModule]
    prev_op: nn.Module | None
    prev_op_name: str | None
    inspect: nn.Module | None


def get_submodule(root: nn.Module, path: str, *, what: str) -> nn.Module:
    """``root``'s submodule at dotted ``path``; :class:`DefinitionError` names the first missing part."""
    current = root
    walked: list[str] = []
    for part in path.split("."):
        child = current._modules.get(part)
        if child is None:
            have = ", ".join(sorted(current._modules)) or "no children"
            where = ".".join(walked) or "<root>"
            raise DefinitionError(f"{what} {path!r}: {where} has no child {part!r} (children: {have})")
        current = child
        walked.append(part)
    return current


def resolve_layers(model: nn.Module, definition: ModelDefinition) -> list[tuple[str, nn.Module]]:
    """``(full dotted name, layer)`` for every decoder layer, in order."""
    container = get_submodule(model, definition.layers_path, what="layers_path")
    layers = [(f"{definition.layers_path}.{name}", child) for name, child in container.named_children()]
    if not layers:
        raise DefinitionError(f"layers_path {definition.layers_path!r}: the container holds no layers")
    return layers


def _expand(layer: nn.Module, name: str) -> list[tuple[str, int | None]]:
    parts = name.split(".")
    if EXPERT_WILDCARD not in parts:
        return [(name, None)]
    at = parts.index(EXPERT_WILDCARD)
    container_path = ".".join(parts[:at])
    container = get_submodule(layer, container_path, what="expert container") if container_path else layer
    found = sorted(int(child) for child in container._modules if child.isdigit())
    if not found:
        raise DefinitionError(f"module {name!r}: expert container {container_path!r} has no numbered children")
    return [(".".join([*parts[:at], str(e), *parts[at + 1 :]]), e) for e in found]


def _check_linear(module: nn.Module, full_name: str) -> None:
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        found = "no weight" if weight is None else f"weight of shape {tuple(weight.shape)}"
        raise DefinitionError(
            f"module {full_name!r}: expected a linear-like module with weight [out, in], found {found}"
        )


def resolve_groups(layer: nn.Module, layer_name: str, definition: ModelDefinition) -> list[ResolvedGroup]:
    """Bind every group of ``definition`` to ``layer``; optional groups missing from the layer are left out."""
    for name in definition.unquantized:
        get_submodule(layer, name, what=f"unquantized module of {layer_name}")
    groups: list[ResolvedGroup] = []
    for index, spec in enumerate(definition.groups):
        try:
            expanded = [item for name in spec.modules for item in _expand(layer, name)]
            # experts in index order, each expert's modules in the spec's order
            expanded.sort(key=lambda item: -1 if item[1] is None else item[1])
            modules = []
            for rel, expert in expanded:
                module = get_submodule(layer, rel, what=f"module of {layer_name}")
                full = f"{layer_name}.{rel}"
                _check_linear(module, full)
                key = f"{index}:expert{expert}" if expert is not None else f"{index}:shared"
                modules.append(
                    ResolvedModule(rel, full, module, expert, key if spec.shared_input else f"{index}:{rel}")
                )
        except DefinitionError:
            if spec.optional:
                continue
            raise
        prev = get_submodule(layer, spec.prev_op, what=f"prev_op of {layer_name}") if spec.prev_op else None
        inspect = get_submodule(layer, spec.inspect, what=f"inspect module of {layer_name}") if spec.inspect else None
        groups.append(ResolvedGroup(index, spec, modules, prev, spec.prev_op, inspect))
    return groups
