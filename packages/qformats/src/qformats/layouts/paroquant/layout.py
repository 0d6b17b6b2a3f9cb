"""ParoQuant module tensors (FORMAT ``paroquant``): the AWQ GEMM tensors plus the input transform.

Tensors (``K = in``, ``N = out``, ``G`` groups; see :mod:`qformats.layouts.awq.gemm` for the AWQ part):

* ``qweight`` int32 ``[K, N / 8]``, ``qzeros`` int32 ``[G, N / 8]``, ``scales`` ``[G, N]``: AWQ GEMM, 4-bit.
* ``pairs`` int16 ``[krot, K]``, ``theta`` float16 ``[krot, K / 2]``, ``channel_scales`` float16 ``[1, K]``:
  the input transform of :mod:`.rotation` (``krot`` rounds; the reference's default is 8).

The AWQ part is always read with explicit (asymmetric) zero points: the reference's default ParoQuant
quantizer (``opt_quantizer_impl="reference"``) learns zero points even when the config says ``sym: true``.

Rules (ids ``PARO-*``; the AWQ part's own ids ``AWQ-GEMM-*``): bits 4, ``group_size`` -1 or an even divisor
of ``K``; the transform tensors present with those shapes and integer / float dtypes; every round a
matching of each group (pairs of distinct local indices, ``(-1, -1)`` padding); finite angles and finite,
non-zero channel scales.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ...errors import LayoutError
from ...layout_checks import check_tensors, raise_on_violations, require_dims
from ...violations import Violation
from ..registry import LayoutMeta, get_layout
from .logical import FLOAT_DTYPES, INDEX_DTYPES, ParoQuantWeight, pairs_reason
from .rotation import rotation_group_size

RULE = "PARO"
TITLE = "ParoQuant"
TRANSFORM = ("pairs", "theta", "channel_scales")


def _dims_reason(meta: LayoutMeta) -> str | None:
    if meta.bits != 4:
        return f"ParoQuant stores 4-bit AWQ codes only; found bits={meta.bits}"
    try:
        rotation_group_size(meta.group_size, meta.in_features)
    except LayoutError as exc:
        return str(exc)
    return None


def pack_paroquant(weight: ParoQuantWeight) -> dict[str, np.ndarray]:
    """The AWQ GEMM tensors of ``weight.weight`` plus copies of the transform tensors."""
    if weight.weight.bits != 4:
        raise LayoutError(f"{TITLE} pack: 4-bit AWQ codes only; the weight is {weight.weight.bits}-bit")
    tensors = get_layout("gemm").pack(weight.weight)
    tensors.update({name: np.array(getattr(weight, name), copy=True) for name in TRANSFORM})
    return tensors


def infer_meta(tensors: Mapping[str, np.ndarray], *, group_size: int, bits: int = 4, sym: bool = True) -> LayoutMeta:
    """Logical ``in`` (``qweight`` rows) and ``out`` (``scales`` columns) from the tensor shapes."""
    require_dims(TITLE, tensors, ("qweight", "scales"))
    return LayoutMeta(bits, group_size, int(np.shape(tensors["qweight"])[0]), int(np.shape(tensors["scales"])[1]), sym)


def validate_paroquant(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
    """Every broken rule: dims (``PARO-DIMS``), the AWQ part, the transform tensors and their values."""
    reason = _dims_reason(meta)
    if reason is not None:
        return [Violation(f"{RULE}-DIMS", "config", "a ParoQuant-compatible shape", reason)]
    found = list(get_layout("gemm").validate(tensors, replace(meta, sym=False)))
    k = meta.in_features
    krot = int(np.shape(tensors["pairs"])[0]) if "pairs" in tensors and np.ndim(tensors["pairs"]) == 2 else 1
    specs = {
        "pairs": (INDEX_DTYPES, (krot, k)),
        "theta": (FLOAT_DTYPES, (krot, k // 2)),
        "channel_scales": (FLOAT_DTYPES, (1, k)),
    }
    if not check_tensors(tensors, specs, RULE, found):
        return found
    g = rotation_group_size(meta.group_size, k)
    bad_pairs = pairs_reason(np.asarray(tensors["pairs"]), g)
    if bad_pairs is not None:
        found.append(Violation(f"{RULE}-PAIRS", "pairs", "a matching of every group per round", bad_pairs))
    if not np.isfinite(np.asarray(tensors["theta"], dtype=np.float32)).all():
        found.append(Violation(f"{RULE}-THETA-VALUE", "theta", "finite angles", "inf or nan"))
    scales = np.asarray(tensors["channel_scales"], dtype=np.float32)
    if not (np.isfinite(scales).all() and (scales != 0).all()):
        found.append(Violation(f"{RULE}-SCALE-VALUE", "channel_scales", "finite and non-zero", "zero, inf or nan"))
    return found


def unpack_paroquant(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> ParoQuantWeight:
    """Read ParoQuant tensors as a :class:`ParoQuantWeight`; raises :class:`LayoutError` listing every violation."""
    raise_on_violations(TITLE, validate_paroquant(tensors, meta))
    weight = get_layout("gemm").unpack(tensors, replace(meta, sym=False))
    return ParoQuantWeight(weight, *(np.array(tensors[name], copy=True) for name in TRANSFORM))
