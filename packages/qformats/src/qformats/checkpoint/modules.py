"""Grouping checkpoint tensor names into quantized modules and resolving each module's layout.

A quantized module is a name prefix that owns a ``qweight`` tensor (``model.layers.0.mlp.up_proj``
owns ``...up_proj.qweight``). Its layout tensors are the prefix's tensors with a suffix in
:data:`LAYOUT_SUFFIXES`; its ``bias`` and every tensor outside a quantized module are dense.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ..config.quantizer_formats import marlin_layout
from ..errors import CheckpointFormatError, LayoutError
from ..layouts.registry import LayoutMeta, get_layout, meta_inference
from .config_files import QuantFields, module_overrides

LAYOUT_SUFFIXES: frozenset[str] = frozenset(
    {"qweight", "qzeros", "scales", "g_idx", "scaled_zeros", "g_idx_sort_indices"}
)


@dataclass(frozen=True)
class ModuleEntry:
    """One quantized module: its prefix, layout key, reader metadata and full tensor names by suffix."""

    prefix: str
    layout: str
    meta: LayoutMeta
    tensors: dict[str, str]


def split_name(name: str) -> tuple[str, str]:
    """``"a.b.qweight"`` -> ``("a.b", "qweight")``; a name without a dot has an empty prefix."""
    prefix, _, suffix = name.rpartition(".")
    return prefix, suffix


def group_modules(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prefix -> {suffix: full name} for every prefix that owns a ``qweight``."""
    names = list(names)
    owners = {split_name(n)[0] for n in names if split_name(n)[1] == "qweight"}
    modules: dict[str, dict[str, str]] = {p: {} for p in sorted(owners)}
    for name in names:
        prefix, suffix = split_name(name)
        if prefix in modules and suffix in LAYOUT_SUFFIXES:
            modules[prefix][suffix] = name
    return modules


def _shape_stub(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A zero-stride array with the given shape (lets ``infer_meta`` read shapes without loading data)."""
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


def _as_int(value: object, prefix: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointFormatError(f"module {prefix!r}: dynamic override {name} must be an integer, found {value!r}")
    return value


def resolve_module(
    prefix: str,
    members: Mapping[str, str],
    shapes: Mapping[str, tuple[tuple[int, ...], str]],
    fields: QuantFields,
) -> ModuleEntry | None:
    """The module's :class:`ModuleEntry` (``None`` when a ``-:`` dynamic rule keeps it dense).

    ``shapes`` maps full tensor names to ``(shape, numpy dtype name)``. Raises
    :class:`CheckpointFormatError` naming the module when its layout or dimensions cannot be resolved.
    """
    override = module_overrides(fields, prefix)
    if override is None:
        return None
    bits = _as_int(override.get("bits", fields.bits), prefix, "bits")
    group_size = _as_int(override.get("group_size", fields.group_size), prefix, "group_size")
    sym = bool(override.get("sym", fields.sym))
    key = fields.layout
    if fields.format == "marlin":
        key = marlin_label_layout(fields.method, members, shapes, bits)
    try:
        layout = get_layout(key)
    except LayoutError as exc:
        raise CheckpointFormatError(f"module {prefix!r}: {exc}") from None
    stubs = {suffix: _shape_stub(*shapes[name]) for suffix, name in members.items()}
    infer = meta_inference(layout)
    if infer is None:
        raise CheckpointFormatError(f"module {prefix!r}: layout {key!r} cannot infer module dimensions")
    try:
        meta = infer(stubs, bits=bits, group_size=group_size, sym=sym, pack_dtype=fields.pack_dtype)
    except LayoutError as exc:
        raise CheckpointFormatError(f"module {prefix!r} ({key}): {exc}") from None
    return ModuleEntry(prefix, key, meta, dict(members))


def marlin_label_layout(
    method: str, members: Mapping[str, str], shapes: Mapping[str, tuple[tuple[int, ...], str]], bits: int
) -> str:
    """The layout a ``format: marlin`` module's tensors actually follow, from their shapes.

    The reference writes Marlin-labelled checkpoints with ordinary checkpoint-facing tensors (GPTQ
    ``qweight [in*b/32, out]`` or AWQ GEMM ``qweight [in, out*b/32]``) and re-tiles at load time; tiled
    files (``qweight [in/16, out*16*b/32]``, or a ``g_idx_sort_indices`` tensor) use our Marlin layouts.
    GPTQ-shaped modules resolve to ``gptq``; :class:`~qformats.checkpoint.reader.Checkpoint` then picks
    v1 or v2 from the zero words.
    """
    tiled_key = marlin_layout(method)
    if "g_idx_sort_indices" in members or "qweight" not in members or "scales" not in members:
        return tiled_key
    q_cols = shapes[members["qweight"]][0][-1]
    out = shapes[members["scales"]][0][-1]
    if q_cols == out * 16 * bits // 32:
        return tiled_key
    if q_cols == out:
        return "gptq"
    return "gemm"
