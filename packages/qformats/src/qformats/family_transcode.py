"""The exact bridges between the scalar-code layouts and two families outside the registry.

* ``qqq``: per-channel QQQ is exactly a symmetric 4-bit weight (scale ``16 * s_channel``, zero 8);
  grouped QQQ only when ``s_channel * s_group`` gives the identical float32 weight. Writing QQQ from a
  scalar weight works for ``group_size -1`` (a grouped weight does not say how to split its scales).
* ``paroquant``: a ParoQuant module whose input transform is the identity is exactly its AWQ GEMM part;
  written from a scalar weight with the identity transform (``krot`` rounds, the reference's default 8).

Each family's :class:`~qformats.layouts.families.ScalarBridge` (wired up in
:mod:`qformats.layouts.builtin_families`) is made of its ``*_to_scalar`` / ``*_from_scalar`` functions here;
:func:`family_source_weight` and :func:`pack_family` reach them through the weight-family registry.
Anything else raises :class:`~qformats.errors.TranscodeError` saying why (a rotating ParoQuant layer, a
grouped QQQ weight whose two scale levels do not multiply exactly, a family without a bridge, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import LayoutError, TranscodeError, UnsupportedLayoutError
from .layouts import paroquant, qqq
from .layouts.families import ScalarBridge, get_family, scalar_family_keys
from .layouts.registry import LayoutMeta
from .logical import QuantizedWeight

PAROQUANT_KROT = 8
Packed = tuple[dict[str, np.ndarray], LayoutMeta]


def family_layouts() -> tuple[str, ...]:
    """The family keys with an exact scalar bridge (``qqq``, ``paroquant``), in registration order."""
    return scalar_family_keys()


def _meta(weight: QuantizedWeight) -> LayoutMeta:
    return LayoutMeta(weight.bits, weight.group_size, weight.in_features, weight.out_features, weight.sym)


def _exact_scalar(family: str, unpack: Callable[[], Any]) -> QuantizedWeight:
    """``unpack()``'s family weight as its exact scalar weight (a ``LayoutError`` reading it -> TranscodeError)."""
    try:
        weight = unpack()
    except LayoutError as exc:
        raise TranscodeError(f"cannot read the source as {family!r}: {exc}") from exc
    return weight.to_quantized_weight()  # type: ignore[no-any-return]


def _packed(family: str, weight: QuantizedWeight, pack: Callable[[], dict[str, np.ndarray]]) -> Packed:
    """``pack()``'s tensors and the meta of ``weight`` (a ``LayoutError`` packing it -> TranscodeError)."""
    meta = _meta(weight)
    try:
        return pack(), meta
    except LayoutError as exc:
        raise TranscodeError(f"cannot transcode to {family!r}: {exc}") from exc


def qqq_to_scalar(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
    """The scalar weight QQQ tensors hold exactly (per-channel, or grouped when the scales multiply exactly)."""
    return _exact_scalar("qqq", lambda: qqq.unpack_qqq(tensors, meta))


def qqq_from_scalar(weight: QuantizedWeight) -> Packed:
    """``weight`` as QQQ tensors (``group_size -1``) and the meta to read them back."""
    return _packed("qqq", weight, lambda: qqq.pack_qqq(qqq.QQQWeight.from_quantized_weight(weight)))


def paroquant_to_scalar(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
    """The scalar weight an identity-transform ParoQuant module holds exactly (its AWQ GEMM part)."""
    return _exact_scalar("paroquant", lambda: paroquant.unpack_paroquant(tensors, meta))


def paroquant_from_scalar(weight: QuantizedWeight) -> Packed:
    """``weight`` as ParoQuant tensors with the identity transform (``krot`` :data:`PAROQUANT_KROT`)."""
    return _packed(
        "paroquant",
        weight,
        lambda: paroquant.pack_paroquant(paroquant.ParoQuantWeight.from_quantized_weight(weight, krot=PAROQUANT_KROT)),
    )


def _bridge(family: str) -> ScalarBridge:
    try:
        bridge = get_family(family).scalar
    except UnsupportedLayoutError as exc:
        raise TranscodeError(str(exc)) from exc
    if bridge is None:
        raise TranscodeError(f"weight family {family!r} has no exact scalar bridge; bridged: {family_layouts()}")
    return bridge


def family_source_weight(tensors: Mapping[str, np.ndarray], family: str, meta: LayoutMeta) -> QuantizedWeight:
    """The scalar weight a ``qqq`` / ``paroquant`` module's tensors hold exactly (else TranscodeError)."""
    return _bridge(family).to_scalar(tensors, meta)  # type: ignore[no-any-return]


def pack_family(weight: QuantizedWeight, family: str) -> Packed:
    """``weight`` as ``family`` tensors and the meta to read them back (else TranscodeError)."""
    return _bridge(family).from_scalar(weight)
