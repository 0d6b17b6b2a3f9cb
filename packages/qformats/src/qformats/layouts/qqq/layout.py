"""QQQ module tensors (FORMAT ``qqq``): ``B``, ``s_channel``, ``s_group`` (plus an optional ``bias``).

Tensors (``K = in``, ``N = out``; see :mod:`.tiles` for the permutations):

* ``B``         int32 ``[K / 16, N * 2]``: 4-bit nibbles in QQQ tiles. Grouped: the nibble is the code
  (signed value ``code - 8``); per-channel: the nibble is the signed value's two's complement
  (``code ^ 8``), tiled with the per-channel word order.
* ``s_channel`` float32 ``[1, N]`` in the channel scale order.
* ``s_group``   float16 ``[K / group_size, N]`` in the group scale order; per-channel: an empty float16
  tensor (the reference saves shape ``(0,)``).

The module is per-channel when ``group_size`` is ``-1`` **or equals** ``in_features`` (the reference
runtime decides by ``group_size == in_features``; a 128-group on a 128-wide input is per-channel).
Layout rules (ids ``QQQ-*``): 4-bit only, ``K % 16 == 0``, ``N % 64 == 0``, ``K % group_size == 0``.
The reference's kernels additionally require ``group_size`` -1 or 128 and ``K``, ``N`` multiples of 64
(with a ``(K, N)`` tile pair); those are kernel limits, not layout rules, and are not checked here.

QQQ weights are not one ``scales * (codes - zeros)`` product, so ``qqq`` is not in the layout registry;
these functions are its interface, over :class:`~qformats.layouts.qqq.logical.QQQWeight`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import LayoutError
from ...layout_checks import INT32_WORDS, check_tensors, raise_on_violations, require_dims
from ...violations import Violation
from ..marlin._tiles import scale_perms
from ..registry import LayoutMeta
from .logical import ZERO, QQQWeight
from .tiles import TILE, tile_nibbles, untile_nibbles

RULE = "QQQ"
TITLE = "QQQ"
MIN_N = 64


def is_per_channel(group_size: int, in_features: int) -> bool:
    """The reference's test: per-channel when ``group_size`` is -1 or the whole input width."""
    return group_size in (-1, in_features)


def _permute(values: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values.reshape(-1, perm.size)[:, perm].reshape(values.shape))


def _unpermute(values: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return _permute(values, np.argsort(perm))


def _dims_reason(meta: LayoutMeta) -> str | None:
    k, n = meta.in_features, meta.out_features
    if meta.bits != 4:
        return f"QQQ stores 4-bit codes only; found bits={meta.bits}"
    if k % TILE or n % MIN_N or k <= 0 or n <= 0:
        return f"QQQ tiles need in_features % 16 == 0 and out_features % 64 == 0; found in={k}, out={n}"
    if not is_per_channel(meta.group_size, k) and (meta.group_size <= 0 or k % meta.group_size):
        return f"QQQ needs group_size -1 or a divisor of in_features; found group_size={meta.group_size}, in={k}"
    return None


def pack_qqq(weight: QQQWeight) -> dict[str, np.ndarray]:
    """``weight`` as QQQ tensors ``B``, ``s_channel``, ``s_group`` (the reference's pack, bit for bit)."""
    n, k = weight.codes.shape
    meta = LayoutMeta(4, weight.group_size, k, n)
    reason = _dims_reason(meta)
    if reason is not None:
        raise LayoutError(f"{TITLE} pack: {reason}")
    grouped_perm, channel_perm = scale_perms()
    if weight.s_group is not None and weight.group_size == k:
        raise LayoutError(
            f"{TITLE} pack: group_size {k} equals in_features, which QQQ stores per-channel (no s_group); "
            "use a group_size -1 QQQWeight"
        )
    s_channel = _permute(weight.s_channel.reshape(1, n), channel_perm)
    if weight.s_group is None:
        words = tile_nibbles(weight.codes ^ np.uint8(ZERO), "channel")
        return {"B": words, "s_channel": s_channel, "s_group": np.zeros((0,), np.float16)}
    return {
        "B": tile_nibbles(weight.codes, "grouped"),
        "s_channel": s_channel,
        "s_group": _permute(weight.s_group, grouped_perm),
    }


def infer_meta(tensors: Mapping[str, np.ndarray], *, group_size: int, bits: int = 4) -> LayoutMeta:
    """Logical ``in`` (``B`` rows * 16) and ``out`` (``s_channel`` columns) from the tensor shapes."""
    require_dims(TITLE, tensors, ("B", "s_channel"))
    k = int(np.shape(tensors["B"])[0]) * TILE
    return LayoutMeta(bits, group_size, k, int(np.shape(tensors["s_channel"])[1]))


def validate_qqq(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
    """Every broken QQQ rule: dims (``QQQ-DIMS``), presence, dtypes, shapes, finite scales."""
    reason = _dims_reason(meta)
    if reason is not None:
        return [Violation(f"{RULE}-DIMS", "config", "a QQQ-compatible shape", reason)]
    k, n = meta.in_features, meta.out_features
    group_shape = (0,) if is_per_channel(meta.group_size, k) else (k // meta.group_size, n)
    specs = {
        "B": (INT32_WORDS, (k // TILE, n * 2)),
        "s_channel": (("float32",), (1, n)),
        "s_group": (("float16",), group_shape),
    }
    found: list[Violation] = []
    if not check_tensors(tensors, specs, RULE, found):
        return found
    for name in ("s_channel", "s_group"):
        values = np.asarray(tensors[name])
        if not np.isfinite(values).all():
            found.append(Violation(f"{RULE}-SCALE-VALUE", name, "finite scales", "inf or nan"))
    return found


def unpack_qqq(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QQQWeight:
    """Read QQQ tensors as a :class:`QQQWeight`; raises :class:`LayoutError` listing every violation."""
    raise_on_violations(TITLE, validate_qqq(tensors, meta))
    k, n = meta.in_features, meta.out_features
    grouped_perm, channel_perm = scale_perms()
    s_channel = _unpermute(np.asarray(tensors["s_channel"]), channel_perm).reshape(n).astype(np.float32)
    if is_per_channel(meta.group_size, k):
        codes = untile_nibbles(np.asarray(tensors["B"]), "channel", k, n) ^ np.uint8(ZERO)
        return QQQWeight(codes, None, s_channel, -1)
    codes = untile_nibbles(np.asarray(tensors["B"]), "grouped", k, n)
    s_group = _unpermute(np.asarray(tensors["s_group"]), grouped_perm)
    return QQQWeight(codes, s_group, s_channel, meta.group_size)
