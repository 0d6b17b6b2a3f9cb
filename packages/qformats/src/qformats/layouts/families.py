"""The weight-family registry: family key -> :class:`WeightFamily`, and the lookups every package uses.

A weight family is one kind of logical weight object and the module tensors it is stored as. The
``integer`` family is every ``scales * (codes - zeros)`` layout of :mod:`qformats.layouts.registry`
(logical :class:`~qformats.logical.QuantizedWeight`; packed through ``get_layout(format)``); every other
family has its own logical object with ``dequantize() -> float32 [out, in]`` and is read here through
:attr:`WeightFamily.read`. Built-in keys (:data:`BUILTIN_FAMILY_KEYS`, in registration order): ``integer``,
``fp8``, ``bnb4``, ``int8`` (bitsandbytes row-scaled int8), ``gguf`` (GGUF block types), ``qqq``,
``paroquant``, ``vptq``, ``exl3``.

A family records the config ``quant_method`` it is saved under (``bitsandbytes`` for ``bnb4`` and
``int8``: the on-disk value) and the config ``format`` values that select it, so a package converts a
config to a family with :func:`family_for_config`, a logical object with :func:`family_of` and a
module's tensor names with :func:`family_by_marker`; none keeps a table of its own. A duplicate
registration raises :class:`~qformats.errors.DuplicateRegistrationError`; an unknown key, method or
object raises :class:`~qformats.errors.UnsupportedLayoutError` naming the value and the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DuplicateRegistrationError, LayoutError, UnsupportedLayoutError
from .builtin_loader import BuiltinLoader


class FamilyInputError(LayoutError):
    """A module's tensors or reading options do not fit its family (names the tensor or option)."""


@dataclass(frozen=True)
class ModuleInput:
    """What a family reader needs besides one module's tensors.

    ``in_features`` / ``out_features``: the logical ``[out, in]`` dims; ``config``: the family's scheme
    fields (FP8 format and scale method, ``group_size`` of QQQ / ParoQuant, the VPTQ fields); ``qtype``:
    the ggml type name of a GGUF module; ``semantics``: the FP8 scale semantics when the config has none.
    """

    in_features: int
    out_features: int
    config: Mapping[str, Any] = field(default_factory=dict)
    qtype: str | None = None
    semantics: str | None = None


@dataclass(frozen=True)
class FamilyRead:
    """One module read by its family: the logical object, its bit width and group size (``-1``: none)."""

    logical: object
    bits: int
    group_size: int


Reader = Callable[[Mapping[str, np.ndarray], ModuleInput], FamilyRead]
Packer = Callable[[Any], dict[str, np.ndarray]]


@dataclass(frozen=True)
class WeightFamily:
    """One weight family (see the module docstring).

    * ``key``: the registry key (``"fp8"``, ``"bnb4"``, ``"int8"``, ``"gguf"``, ``"integer"`` ...).
    * ``method``: the config ``quant_method`` its checkpoints are saved under (``""`` for ``integer``,
      which is every method without a family of its own).
    * ``formats``: the config ``format`` values that select it among its method's families (empty: any).
    * ``markers``: local tensor names whose presence marks a stored module (``weight_scale_inv`` ...).
    * ``logical_type``: the class of its logical objects; ``logical_kind``: the name a kernel contract
      gives them (``"bnb8"`` for ``int8``, ``"gguf_blocks"`` for ``gguf``; otherwise the key).
    * ``weight_only``: quantized from the weight alone by ``qalgos.weight_only`` (FP8, bitsandbytes, GGUF).
    * ``pack(logical) -> {name: array}``; ``read(tensors, ModuleInput) -> FamilyRead`` (raises
      :class:`FamilyInputError` or the layout's ``LayoutError`` naming the tensor); ``shape(logical) ->
      (out, in)`` from its fields; ``accepts(tensors) -> bool`` picks among the families of one method
      from a module's tensors (``None``: the method has this family only). ``pack`` / ``read`` are
      ``None`` for ``integer`` (its layouts do both, :func:`qformats.layouts.registry.get_layout`).
    """

    key: str
    method: str
    formats: tuple[str, ...]
    markers: tuple[str, ...]
    logical_type: type
    logical_kind: str
    weight_only: bool
    pack: Packer | None
    read: Reader | None
    shape: Callable[[Any], tuple[int, int]]
    accepts: Callable[[Mapping[str, np.ndarray]], bool] | None = None


_FAMILIES: dict[str, WeightFamily] = {}

#: Every key the built-in families register, in registration order (a test holds them equal).
BUILTIN_FAMILY_KEYS: tuple[str, ...] = ("integer", "fp8", "bnb4", "int8", "gguf", "qqq", "paroquant", "vptq", "exl3")
# the built-in family records (they import the layout codecs), once, on first lookup
_load_builtins = BuiltinLoader(__name__.rpartition(".")[0], ("builtin_families",)).ensure


def register_family(family: WeightFamily) -> WeightFamily:
    """Register ``family`` under ``family.key``; a second registration of a key raises."""
    if family.key in _FAMILIES:
        raise DuplicateRegistrationError(f"weight family {family.key!r} is already registered")
    _FAMILIES[family.key] = family
    return family


def registered_families() -> tuple[WeightFamily, ...]:
    """Every registered family, in registration order."""
    _load_builtins()
    return tuple(_FAMILIES.values())


def _known() -> str:
    return ", ".join(_FAMILIES) or "none"


def get_family(key: str) -> WeightFamily:
    """The family registered under ``key``; raises naming the key and the known ones."""
    _load_builtins()
    family = _FAMILIES.get(str(key))
    if family is None:
        raise UnsupportedLayoutError(f"no weight family registered as {key!r}; known: {_known()}")
    return family


def weight_only_methods() -> tuple[str, ...]:
    """The config methods of the weight-only families (``fp8``, ``bitsandbytes``, ``gguf``), in order."""
    return tuple(dict.fromkeys(f.method for f in registered_families() if f.weight_only))


def weight_only_keys() -> tuple[str, ...]:
    """The keys of the weight-only families (``fp8``, ``bnb4``, ``int8``, ``gguf``), in order."""
    return tuple(f.key for f in registered_families() if f.weight_only)


def families_of_method(method: str) -> tuple[WeightFamily, ...]:
    """The families saved under config method ``method`` (empty for an integer method such as ``gptq``)."""
    return tuple(f for f in registered_families() if f.method and f.method == str(method))


def family_methods() -> tuple[str, ...]:
    """Every config method that names families of its own (not ``integer``), in order."""
    return tuple(dict.fromkeys(f.method for f in registered_families() if f.method))


def family_for_config(method: str, format: str | None = None) -> WeightFamily:
    """The family of a config's ``method`` and ``format`` (an integer method gives ``integer``).

    With several families under one method (``bitsandbytes``) the ``format`` picks: a family lists it in
    ``formats``, or the one with no ``formats`` takes the rest. Raises naming the method and format."""
    found = families_of_method(method)
    if not found:
        return get_family("integer")
    if len(found) == 1:
        return found[0]
    listed = [f for f in found if format is not None and str(format) in f.formats]
    rest = [f for f in found if not f.formats]
    picked = listed or rest
    if len(picked) != 1:
        keys = ", ".join(f"{f.key} ({', '.join(f.formats) or 'other formats'})" for f in found)
        raise UnsupportedLayoutError(f"method {method!r} format {format!r}: expected a format of {keys}")
    return picked[0]


def family_for_tensors(method: str, tensors: Mapping[str, np.ndarray]) -> WeightFamily:
    """The family of one stored module of config ``method`` from its tensors (``accepts``); raises naming
    the method and the known ones when the method has no family or the tensors fit none."""
    found = families_of_method(method)
    if not found:
        raise FamilyInputError(f"family {method!r}: expected one of {', '.join(family_methods())}")
    if len(found) == 1:
        return found[0]
    fitting = [f for f in found if f.accepts is not None and f.accepts(tensors)]
    if len(fitting) != 1:
        names = ", ".join(sorted(tensors))
        raise FamilyInputError(f"{method}: tensors [{names}] fit {len(fitting)} of {[f.key for f in found]}")
    return fitting[0]


def family_of(weight: object) -> WeightFamily:
    """The family whose logical class ``weight`` is; raises naming its type and the known families."""
    for family in registered_families():
        if type(weight) is family.logical_type:
            return family
    for family in registered_families():
        if isinstance(weight, family.logical_type):
            return family
    raise UnsupportedLayoutError(f"no weight family for a {type(weight).__name__}; known: {_known()}")


def family_by_marker(names: Iterable[str], method: str | None = None) -> WeightFamily | None:
    """The family one of whose markers is among a module's local tensor ``names`` (only the families of
    ``method`` when given); ``None`` when none is; raises when several families claim the names."""
    present = set(names)
    pool = families_of_method(method) if method is not None else registered_families()
    found = [f for f in pool if present & set(f.markers)]
    if len(found) > 1:
        raise UnsupportedLayoutError(
            f"tensors {sorted(present)}: markers of several families {[f.key for f in found]}; pass method="
        )
    return found[0] if found else None


def marker_suffixes(method: str) -> tuple[str, ...]:
    """Every marker tensor name of the families of config ``method``, in registration order."""
    return tuple(dict.fromkeys(m for f in families_of_method(method) for m in f.markers))
