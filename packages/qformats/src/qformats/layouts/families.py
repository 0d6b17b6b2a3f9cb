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
module's tensor names with :func:`family_by_marker`; none keeps a table of its own.

Each record also owns everything the rest of qformats does with the family's stored modules (so no
module keeps a family-keyed table or compares family keys): which local tensor names belong to a module
(:meth:`WeightFamily.owns`), how a checkpoint lists, checks and reads a module outside the layout
registry (:class:`StoredModules`: QQQ, ParoQuant, VPTQ, EXL3), how a weight-only directory summarizes a
module (``summary``: FP8, bitsandbytes, GGUF), the exact bridges to and from a scalar weight
(:class:`ScalarBridge`: QQQ, ParoQuant), how the weight-only families quantize a float weight
(``quantize``) and the options a config gives them (``read_options``, ``quantize_options``). The scalar-code
layouts (GPTQ, AWQ, Marlin, ... of :mod:`qformats.layouts.registry`) are the one ``integer`` family here:
the layout registry is the second, related registry, keyed by ``format`` (docs/internals.md). A duplicate
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
Tensors = Mapping[str, np.ndarray]
Dims = tuple[int, int] | None


@dataclass(frozen=True)
class StoredModules:
    """How a checkpoint lists, checks and reads the modules of a family outside the layout registry.

    * ``tensors``: the local tensor names one module may hold (dotted ones included: VPTQ's
      ``centroids.weight``); a prefix owning the family's first marker is a module.
    * ``meta(stubs, spec, config, dims) -> LayoutMeta``: the module's bits, group size, ``sym`` and
      logical ``in`` / ``out`` (``dims`` when given, else read from the tensors; 0 for dims they leave
      open) from zero-stride ``stubs`` (shapes and dtypes only) and the module's
      :class:`~qformats.config.model.ModuleSpec`; raises ``LayoutError`` naming the tensor it cannot
      read dims from.
    * ``check(tensors, spec, config, dims) -> [Violation]``: the family's rules for one module (``dims``:
      ``(in, out)`` when known); raises ``LayoutError`` for dims it cannot infer.
    * ``load(tensors, meta, config) -> logical``: the module's logical object (``dequantize() -> float32
      [out, in]``); raises ``LayoutError`` / ``ConfigError`` naming the tensor or field.
    """

    tensors: frozenset[str]
    meta: Callable[[Tensors, Any, Any, Dims], Any]
    check: Callable[[Tensors, Any, Any, Dims], list[Any]]
    load: Callable[[Tensors, Any, Any], object]


@dataclass(frozen=True)
class ScalarBridge:
    """The exact bridges between a family and a scalar :class:`~qformats.logical.QuantizedWeight`.

    ``to_scalar(tensors, meta) -> QuantizedWeight`` and ``from_scalar(weight) -> (tensors, meta)``; both
    raise :class:`~qformats.errors.TranscodeError` saying why a weight has no exact counterpart.
    ``config_fields``: the family's own fields of a transcoded checkpoint's config, in the order written
    (``qformats.checkpoint.transcode_dir``)."""

    to_scalar: Callable[[Tensors, Any], Any]
    from_scalar: Callable[[Any], tuple[dict[str, np.ndarray], Any]]
    config_fields: Mapping[str, object] = field(default_factory=dict)


def _no_tensors(local: str) -> bool:
    return False


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
    * ``zeros``: how its weights hold a zero point, as ``qformats.inspect`` reports it (``""``: the
      layout's zero convention is probed from the tensors, the ``integer`` family).
    * ``member(local) -> bool``: whether a local tensor name (no module prefix) belongs to a stored module
      (``bias`` never does); :meth:`owns` asks it, or ``stored.tensors`` when given.
    * ``stored``: :class:`StoredModules` for the families a checkpoint lists as modules of their own.
    * ``summary(checkpoint, prefix, shapes) -> WeightOnlyModule``: a weight-only module's stored type,
      dims and violations (:mod:`qformats.checkpoint.weight_only_modules`).
    * ``scalar``: :class:`ScalarBridge` for a family that is exactly a scalar weight (``transcode``).
    * ``quantize(w, options) -> logical``: a weight-only family's reference quantizer of a float32
      ``[out, in]`` weight; ``options`` holds qalgos' ``WeightOnlySpec`` fields and ``source_dtype``;
      ``option_problem(options) -> str | None`` says which option is wrong before quantizing.
    * ``read_options(config, module, logical) -> {name: value}``: the :class:`ModuleInput` fields
      (``config``, ``qtype``) one stored module of a checkpoint with ``config`` is read with (after
      ``dynamic``; ``logical``: the module's logical weight when at hand); ``quantize_options(config) ->
      {name: value}``: the ``quantize`` options a weight-only config gives; ``config_fields(config) ->
      {name: value}``: the family's own fields of the stored config (:mod:`qformats.family_options`).
    * ``shape_problem(config, out, in) -> str | None``: why the family cannot hold an ``[out, in]`` linear
      under ``config`` (the refusal's text after the module name; :mod:`qformats.family_shapes`).
    * ``stored_bits``: the widths its modules store (``bnb4``: 4, ``int8``: 8; empty: whatever the config gives).
    * ``gguf_blocks``: its stored tensors are GGUF blocks, which a ``.gguf`` export copies as they are (``gguf``).
    * ``bfloat16_compute_tensor``: a stored tensor whose ``bfloat16`` storage makes a reader compute in bfloat16
      (the ``compute_dtype`` option; a kernel's numpy copy of it is float32): ``vptq``'s ``centroids.weight``.
    * :attr:`layout_based` (derived): its modules are packed and read by a registered qformats layout
      (``integer``: ``pack`` and ``read`` are ``None``).
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
    zeros: str = ""
    member: Callable[[str], bool] = _no_tensors
    stored: StoredModules | None = None
    summary: Callable[[Any, str, Mapping[str, tuple[tuple[int, ...], str]]], Any] | None = None
    scalar: ScalarBridge | None = None
    quantize: Callable[[np.ndarray, Mapping[str, Any]], object] | None = None
    option_problem: Callable[[Mapping[str, Any]], str | None] | None = None
    read_options: Callable[[Any, str | None, Any], dict[str, Any]] | None = None
    quantize_options: Callable[[Any], dict[str, Any]] | None = None
    config_fields: Callable[[Any], dict[str, Any]] | None = None
    shape_problem: Callable[[Any, int, int], str | None] | None = None
    stored_bits: tuple[int, ...] = ()
    gguf_blocks: bool = False
    bfloat16_compute_tensor: str = ""

    @property
    def layout_based(self) -> bool:
        """Whether a registered qformats layout packs and reads its modules (the ``integer`` family)."""
        return self.pack is None and self.read is None

    def owns(self, local: str) -> bool:
        """Whether local tensor name ``local`` belongs to one stored module of this family."""
        if self.stored is not None:
            return local in self.stored.tensors
        return self.member(local)


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


def stored_family_keys() -> tuple[str, ...]:
    """The keys of the families a checkpoint lists as modules of their own (``qqq``, ``paroquant``, ``vptq``,
    ``exl3``: those with :attr:`WeightFamily.stored`), in order."""
    return tuple(f.key for f in registered_families() if f.stored is not None)


def scalar_family_keys() -> tuple[str, ...]:
    """The keys of the families with an exact scalar bridge (``qqq``, ``paroquant``), in order."""
    return tuple(f.key for f in registered_families() if f.scalar is not None)


def weight_only_methods() -> tuple[str, ...]:
    """The config methods of the weight-only families (``fp8``, ``bitsandbytes``, ``gguf``), in order."""
    return tuple(dict.fromkeys(f.method for f in registered_families() if f.weight_only))


def weight_only_keys() -> tuple[str, ...]:
    """The keys of the weight-only families (``fp8``, ``bnb4``, ``int8``, ``gguf``), in order."""
    return tuple(f.key for f in registered_families() if f.weight_only)


def layout_kinds() -> frozenset[str]:
    """The kernel-contract ``logical_kind`` of the layout-based families (:attr:`WeightFamily.layout_based`:
    ``integer``), whose modules' ``format`` names a registered layout."""
    return frozenset(f.logical_kind for f in registered_families() if f.layout_based)


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


def marked_modules(families: Iterable[WeightFamily], names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prefix -> {local name: full name} for every prefix owning a marker of ``families`` (the one way a
    checkpoint finds the modules of the families outside the layout registry), prefixes sorted.

    A name ending in ``.<marker>`` marks its prefix as a module; a name belongs to a module when its local
    part (after ``prefix.``) is one a family of ``families`` owns."""
    names = list(names)
    pool = tuple(families)
    marks = {m for f in pool for m in f.markers}
    owners = sorted({n[: -len(m) - 1] for n in names for m in marks if n.endswith("." + m)})
    modules: dict[str, dict[str, str]] = {p: {} for p in owners}
    for name in names:
        for prefix in owners:
            local = name[len(prefix) + 1 :]
            if name.startswith(prefix + ".") and any(f.owns(local) for f in pool):
                modules[prefix][local] = name
    return modules
