"""The exact bridges between the scalar-code layouts and two families outside the registry.

* ``qqq``: per-channel QQQ is exactly a symmetric 4-bit weight (scale ``16 * s_channel``, zero 8);
  grouped QQQ only when ``s_channel * s_group`` gives the identical float32 weight. Writing QQQ from a
  scalar weight works for ``group_size -1`` (a grouped weight does not say how to split its scales).
* ``paroquant``: a ParoQuant module whose input transform is the identity is exactly its AWQ GEMM part;
  written from a scalar weight with the identity transform (``krot`` rounds, the reference's default 8).

Anything else raises :class:`~qformats.errors.TranscodeError` saying why (a rotating ParoQuant layer, a
grouped QQQ weight whose two scale levels do not multiply exactly, ...).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import LayoutError, TranscodeError
from .layouts import paroquant, qqq
from .layouts.registry import LayoutMeta
from .logical import QuantizedWeight

FAMILY_LAYOUTS: tuple[str, ...] = ("qqq", "paroquant")
PAROQUANT_KROT = 8


def family_source_weight(tensors: Mapping[str, np.ndarray], family: str, meta: LayoutMeta) -> QuantizedWeight:
    """The scalar weight a ``qqq`` / ``paroquant`` module's tensors hold exactly (else TranscodeError)."""
    try:
        weight = qqq.unpack_qqq(tensors, meta) if family == "qqq" else paroquant.unpack_paroquant(tensors, meta)
    except LayoutError as exc:
        raise TranscodeError(f"cannot read the source as {family!r}: {exc}") from exc
    return weight.to_quantized_weight()


def pack_family(weight: QuantizedWeight, family: str) -> tuple[dict[str, np.ndarray], LayoutMeta]:
    """``weight`` as ``family`` tensors and the meta to read them back (else TranscodeError)."""
    meta = LayoutMeta(weight.bits, weight.group_size, weight.in_features, weight.out_features, weight.sym)
    try:
        if family == "qqq":
            return qqq.pack_qqq(qqq.QQQWeight.from_quantized_weight(weight)), meta
        paro = paroquant.ParoQuantWeight.from_quantized_weight(weight, krot=PAROQUANT_KROT)
        return paroquant.pack_paroquant(paro), meta
    except LayoutError as exc:
        raise TranscodeError(f"cannot transcode to {family!r}: {exc}") from exc
