"""Lossless transcoding between checkpoint layouts, through the logical weight, bit exact.

``transcode(tensors, from_="gptq", to="gemm", meta=...)`` unpacks the source layout into a
:class:`~qformats.logical.QuantizedWeight`, asks the target whether it can hold that object exactly
(:meth:`cannot_represent`), packs it, and (by default) unpacks the result again to prove the round trip.
When the target cannot represent the source (act-order ``g_idx`` into a layout without ``g_idx``,
asymmetric zeros into a symmetric-only layout, a partial group into a layout that needs divisibility,
an unsupported bit width, ...) it raises :class:`~qformats.errors.TranscodeError` naming the reason;
it never returns an approximation under an exact name. QQQ and ParoQuant modules take part where they
are exactly a scalar weight (:mod:`qformats.family_transcode`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from .errors import LayoutError, TranscodeError, UnsupportedLayoutError
from .family_transcode import family_layouts, family_source_weight, pack_family
from .layouts.registry import Layout, LayoutMeta, get_layout
from .logical import QuantizedWeight

# Layouts whose unpack yields the scalar logical weight (codes, scales, zeros, g_idx), so any pair of
# them can be transcoded when the target can represent the source.
SCALAR_LAYOUTS: tuple[str, ...] = (
    "gptq",
    "gptq_v2",
    "gptq_p",
    "gemm",
    "gemv",
    "gemv_fast",
    "llm-awq",
    "marlin",
    "awq_marlin",
)

# Every layout ``transcode`` reads or writes (the scalar ones plus the exact family bridges).
TRANSCODE_LAYOUTS: tuple[str, ...] = (*SCALAR_LAYOUTS, *family_layouts())

# Word dtype each target packs by default (the rest use int32).
DEFAULT_PACK_DTYPES: dict[str, str] = {"gemv_fast": "int16", "llm-awq": "int16"}


@dataclass(frozen=True)
class TranscodeResult:
    """The target's named tensors and the metadata a reader needs for them."""

    tensors: dict[str, np.ndarray]
    meta: LayoutMeta
    weight: QuantizedWeight


def _scalar_layout(key: str, role: str) -> Layout:
    if str(key) not in SCALAR_LAYOUTS:
        known = ", ".join(TRANSCODE_LAYOUTS)
        raise TranscodeError(f"{role} layout {key!r} is not a scalar-code layout; transcodable layouts: {known}")
    try:
        return get_layout(str(key))
    except UnsupportedLayoutError as exc:
        raise TranscodeError(f"{role} layout {key!r} is not registered: {exc}") from exc


def transcode_weight(weight: QuantizedWeight, to: str, *, pack_dtype: str | None = None) -> TranscodeResult:
    """Pack a logical weight into layout ``to`` losslessly, or raise :class:`TranscodeError` saying why not."""
    if str(to) in family_layouts():
        tensors, meta = pack_family(weight, str(to))
        return TranscodeResult(tensors=tensors, meta=meta, weight=weight)
    target = _scalar_layout(to, "target")
    reason = target.cannot_represent(weight)
    if reason is not None:
        raise TranscodeError(f"cannot transcode to {to!r} losslessly: {reason}")
    dtype = pack_dtype or DEFAULT_PACK_DTYPES.get(str(to), "int32")
    try:
        tensors = target.pack(weight, pack_dtype=dtype)
    except (LayoutError, UnsupportedLayoutError) as exc:
        raise TranscodeError(f"cannot transcode to {to!r}: {exc}") from exc
    meta = LayoutMeta(weight.bits, weight.group_size, weight.in_features, weight.out_features, weight.sym, dtype)
    return TranscodeResult(tensors=tensors, meta=meta, weight=weight)


def transcode(
    tensors: Mapping[str, np.ndarray],
    *,
    from_: str,
    to: str,
    meta: LayoutMeta,
    pack_dtype: str | None = None,
    verify: bool = True,
) -> TranscodeResult:
    """Transcode one module's tensors from layout ``from_`` to layout ``to``, bit exact.

    ``meta`` describes the source (bits, group size, logical in/out, sym, source pack dtype). With
    ``verify`` the packed target is unpacked again and compared field by field with the source's
    logical weight; a difference raises :class:`TranscodeError` instead of returning a wrong result.
    """
    weight = _read_source(tensors, str(from_), meta)
    if str(to) == "marlin" and not weight.sym:
        # GPTQ Marlin is symmetric by construction; an asymmetric-labelled weight whose zeros all equal
        # the midpoint is still exactly representable, so the label follows the data.
        mid = 1 << (weight.bits - 1)
        if bool(np.all(weight.zeros == mid)):
            weight = replace(weight, sym=True)
    result = transcode_weight(weight, to, pack_dtype=pack_dtype)
    if verify:
        back = _read_source(result.tensors, str(to), result.meta)
        if not back.equals(result.weight, compare_sym=False):
            raise TranscodeError(f"transcode {from_!r} -> {to!r} did not round-trip bit exactly (a layout bug)")
    return result


def _read_source(tensors: Mapping[str, np.ndarray], key: str, meta: LayoutMeta) -> QuantizedWeight:
    """The logical weight of one module's tensors in layout ``key`` (scalar or family bridge)."""
    if key in family_layouts():
        return family_source_weight(tensors, key, meta)
    source = _scalar_layout(key, "source")
    try:
        return source.unpack(tensors, meta)
    except (LayoutError, UnsupportedLayoutError) as exc:
        raise TranscodeError(f"cannot read the source as {key!r}: {exc}") from exc
