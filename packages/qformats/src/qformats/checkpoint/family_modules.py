"""Checkpoint modules of the families outside the layout registry: QQQ, ParoQuant, VPTQ and EXL3.

A module is a name prefix that owns the family's marker tensor (``WeightFamily.markers``: QQQ ``B``,
ParoQuant ``qweight``, VPTQ ``indices``, EXL3 ``trellis``); its tensors are the prefix's tensors with a
local name in the family's ``StoredModules.tensors`` (VPTQ's dotted ``centroids.weight`` included),
grouped by :func:`qformats.layouts.families.marked_modules`. Each becomes a
:class:`~qformats.checkpoint.modules.ModuleEntry` whose ``layout`` is the family key and whose ``meta``
carries the module's bits, group size and logical ``[out, in]`` dims, from the family's
``StoredModules.meta`` (the ``*_meta`` functions of :mod:`qformats.stored_families`):

* QQQ and ParoQuant: dims from the tensor shapes (their ``infer_meta``), bits and group size from the
  config (dynamic overrides included); ParoQuant's ``sym`` is always false (its AWQ part stores
  explicit zero points whatever the config says);
* EXL3: dims and bits from ``trellis [in/16, out/16, 16*b]`` (the config's float bits-per-weight is a
  nominal average), group size -1;
* VPTQ: the index rows pad ``out`` and the groups pad ``in``, so dims come from the ``shapes`` argument
  when given, else ``in`` from ``perm [in]`` or a ``norm_dim 0`` ``weight_scale [in]`` and ``out`` from a
  ``norm_dim 1`` ``weight_scale [out]`` or ``indices`` rows * ``vector_len``. A module without them (the
  reference's defaults: no permutation, no norm) has no dims (``in_features = out_features = 0``,
  :func:`dims_known` false): it cannot be checked or dequantized until ``shapes`` gives them
  (``qhf.load_quantized`` takes them from the model).

:func:`family_violations` checks one module with the same family check as :func:`qformats.validate`;
:func:`family_weight` reads its logical object (the family's ``StoredModules.load``, the ``load_*``
functions of :mod:`qformats.stored_families`); :func:`family_dense` dequantizes it to float32 ``[out, in]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..config.model import QuantizeConfig
from ..errors import CheckpointFormatError, ConfigError, LayoutError
from ..layouts.families import StoredModules, WeightFamily, get_family, marked_modules, stored_family_keys
from ..stored_families import UNKNOWN_DIMS
from ..violations import Violation
from .modules import ModuleEntry

Shapes = Mapping[str, tuple[tuple[int, ...], str]]


def is_family(layout: str) -> bool:
    """True for the keys of the families a checkpoint lists as modules of their own (``qqq``, ``paroquant``,
    ``vptq``, ``exl3``: :func:`~qformats.layouts.families.stored_family_keys`)."""
    return layout in stored_family_keys()


def entry_family(entry: ModuleEntry) -> WeightFamily:
    """The weight family of a listed module: its stored family (``qqq`` ...), else ``integer`` (a layout-registry
    module, whose ``layout`` is a layout key such as ``gptq``)."""
    return get_family(entry.layout if is_family(entry.layout) else "integer")


def group_family_modules(layout: str, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prefix -> {local name: full name} for every prefix owning the family's marker tensor."""
    return marked_modules((get_family(layout),), names)


def _stubs(members: Mapping[str, str], shapes: Shapes) -> dict[str, np.ndarray]:
    """Zero-stride arrays with each member's shape and dtype (shape inference without loading data)."""
    return {local: np.broadcast_to(np.zeros((), dtype=shapes[n][1]), shapes[n][0]) for local, n in members.items()}


def resolve_family_module(
    prefix: str,
    members: Mapping[str, str],
    shapes: Shapes,
    config: QuantizeConfig,
    layout: str,
    dims: tuple[int, int] | None = None,
) -> ModuleEntry | None:
    """The module's entry (``None`` when a negative dynamic rule keeps it dense); raises
    :class:`CheckpointFormatError` naming the module when its dims cannot be read from the shapes."""
    spec = config.for_module(prefix)
    if spec is None:
        return None
    try:
        meta = _stored(layout).meta(_stubs(members, shapes), spec, config, dims)
    except LayoutError as exc:
        raise CheckpointFormatError(f"module {prefix!r} ({layout}): {exc}") from None
    return ModuleEntry(prefix, layout, meta, dict(members))


def _stored(layout: str) -> StoredModules:
    stored = get_family(layout).stored
    if stored is None:
        raise CheckpointFormatError(f"weight family {layout!r} has no stored modules of its own")
    return stored


def dims_known(entry: ModuleEntry) -> bool:
    """False for a VPTQ module whose tensors do not pin its dims and no ``shapes`` gave them."""
    return UNKNOWN_DIMS not in (entry.meta.in_features, entry.meta.out_features)


def _dims(entry: ModuleEntry) -> tuple[int, int] | None:
    meta = entry.meta
    return None if UNKNOWN_DIMS in (meta.in_features, meta.out_features) else (meta.in_features, meta.out_features)


def family_violations(entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig) -> list[Violation]:
    """The family's violations for one module (local tensor names); ``SHAPE-UNKNOWN`` for unknown dims
    (callers that can go on without them check :func:`dims_known` first)."""
    spec = config.for_module(entry.prefix)
    if spec is None:
        return []
    dims = _dims(entry)
    marker = get_family(entry.layout).markers[0]
    if dims is None:
        return [
            Violation(
                "SHAPE-UNKNOWN",
                marker,
                "dims pinned by perm / weight_scale, or passed as shapes=",
                "VPTQ in/out not recoverable from these tensors",
            )
        ]
    try:
        return _stored(entry.layout).check(tensors, spec, config, dims)
    except LayoutError as exc:
        return [Violation("SHAPE-UNKNOWN", marker, "inferable dims", str(exc))]


def family_weight(entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig) -> Any:
    """The module's family logical object (``QQQWeight`` ...; raises :class:`CheckpointFormatError` naming the
    module)."""
    try:
        if _dims(entry) is None:
            raise LayoutError("VPTQ in/out are not recoverable from these tensors; pass shapes=")
        return _stored(entry.layout).load(tensors, entry.meta, config)
    except (LayoutError, ConfigError) as exc:
        raise CheckpointFormatError(f"module {entry.prefix!r} ({entry.layout}): {exc}") from None


def family_dense(entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig) -> np.ndarray:
    """float32 ``[out, in]``: the module's dense equivalent weight (ParoQuant: its input transform folded in)."""
    return np.asarray(family_weight(entry, tensors, config).dequantize(), dtype=np.float32)
