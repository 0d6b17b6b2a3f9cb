"""The logical QQQ weight: 4-bit codes with two-level scales (per-group float16, per-channel float32).

QQQ (W4A8) stores more than ``scales * (codes - zeros)``: the group scales turn 4-bit codes into int8
weights, which the per-channel scale then multiplies. Shapes and units (``K = in``, ``N = out``):

* ``codes``     uint8 ``[N, K]`` in ``[0, 15]``; the signed value of a code is ``code - 8``.
* ``s_group``   float16 ``[K / group_size, N]`` (grouped) or ``None`` (per-channel).
* ``s_channel`` float32 ``[N]``.
* ``group_size``: ``-1`` for per-channel, else the group width (the reference runtime uses 128).

Dense weight (float32, the reference's own CPU dequantization, ``g = i // group_size``):

* grouped:     ``W[o, i] = s_channel[o] * clip(round((codes[o, i] - 8) * s_group[g, o]), -128, 127)``
* per-channel: ``W[o, i] = s_channel[o] * 16 * (codes[o, i] - 8)``

``round`` is round-half-to-even. Per-channel QQQ is exactly a symmetric 4-bit ``QuantizedWeight`` with
zero 8 and scale ``16 * s_channel``; a grouped one is a ``QuantizedWeight`` only when its int8 step
is exact (see :meth:`QQQWeight.to_quantized_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError, TranscodeError
from ...logical import QuantizedWeight, default_g_idx

ZERO = 8
CHANNEL_FACTOR = np.float32(16.0)  # 2 ** (8 - bits): the per-channel int4 -> int8 step


@dataclass(frozen=True, eq=False)
class QQQWeight:
    """A QQQ weight in layout-independent form (see the module docstring for shapes and the formula)."""

    codes: np.ndarray
    s_group: np.ndarray | None
    s_channel: np.ndarray
    group_size: int = -1

    def __post_init__(self) -> None:
        if self.codes.dtype != np.uint8 or self.codes.ndim != 2:
            raise LayoutError(f"codes: expected 2-D uint8 [out, in], found {self.codes.dtype} {self.codes.shape}")
        n, k = self.codes.shape
        if self.codes.size and int(self.codes.max()) > 15:
            raise LayoutError(f"codes: expected 4-bit values in [0, 15], found max {int(self.codes.max())}")
        if self.s_channel.dtype != np.float32 or self.s_channel.shape != (n,):
            raise LayoutError(
                f"s_channel: expected float32 ({n},), found {self.s_channel.dtype} {self.s_channel.shape}"
            )
        if self.group_size == -1:
            if self.s_group is not None:
                raise LayoutError("s_group: a per-channel QQQ weight (group_size -1) has no group scales")
            return
        if self.group_size <= 0 or k % self.group_size:
            raise LayoutError(f"group_size: expected -1 or a divisor of in_features {k}, found {self.group_size}")
        shape = (k // self.group_size, n)
        if self.s_group is None or self.s_group.dtype != np.float16 or self.s_group.shape != shape:
            found = "None" if self.s_group is None else f"{self.s_group.dtype} {self.s_group.shape}"
            raise LayoutError(f"s_group: expected float16 {shape} for group_size {self.group_size}, found {found}")

    def int8_weight(self) -> np.ndarray:
        """The int8-valued weight before the channel scale, float32 ``[N, K]`` (values in ``[-128, 127]``)."""
        signed = self.codes.astype(np.float32) - np.float32(ZERO)
        if self.s_group is None:
            return signed * CHANNEL_FACTOR
        group_scale = np.repeat(self.s_group.astype(np.float32).T, self.group_size, axis=1)
        return np.clip(np.round(signed * group_scale), -128, 127).astype(np.float32)

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]``: ``s_channel[o] * int8_weight[o, i]`` (the reference's CPU formula)."""
        result: np.ndarray = self.int8_weight() * self.s_channel[:, None]
        return result

    def to_quantized_weight(self) -> QuantizedWeight:
        """The same weight as a symmetric 4-bit ``QuantizedWeight`` (zero 8, float32 scales).

        Per-channel: always exact (scale ``16 * s_channel``). Grouped: scale ``s_channel * s_group``, and
        only when that gives the identical float32 dense weight (integral, unclipped int8 steps and no
        product rounding); otherwise :class:`TranscodeError` says how many weights would change.
        """
        n, k = self.codes.shape
        if self.s_group is None:
            scales = (self.s_channel * CHANNEL_FACTOR)[None, :]
            if not np.isfinite(scales).all():
                raise TranscodeError("QQQ -> QuantizedWeight: 16 * s_channel overflows float32")
            return QuantizedWeight(
                self.codes.copy(), scales, np.full((1, n), ZERO, np.int32), default_g_idx(k, -1), 4, -1, True
            )
        scales = (self.s_group.astype(np.float32) * self.s_channel[None, :]).astype(np.float32)
        weight = QuantizedWeight(
            self.codes.copy(),
            scales,
            np.full(scales.shape, ZERO, np.int32),
            default_g_idx(k, self.group_size),
            4,
            self.group_size,
            True,
        )
        changed = int(np.count_nonzero(weight.dequantize() != self.dequantize()))
        if changed:
            raise TranscodeError(
                f"QQQ -> QuantizedWeight: {changed} of {n * k} weights differ between s_channel * int8 step and "
                "one float32 scale per group (non-integral or clipped group steps, or product rounding)"
            )
        return weight

    @classmethod
    def from_quantized_weight(cls, weight: QuantizedWeight, s_channel: np.ndarray | None = None) -> QQQWeight:
        """A symmetric 4-bit ``weight`` (zero 8, natural group order) as a QQQ weight, exactly or not at all.

        Per-channel (``group_size -1``): ``s_channel = scales / 16``. Grouped: the caller gives
        ``s_channel [out]`` (the split of a scale into two levels is not determined by the weight) and
        ``s_group = float16(scales / s_channel)``. Raises :class:`TranscodeError` when the QQQ weight
        would not dequantize to the identical float32 weight.
        """
        reason = _shape_reason(weight)
        if reason is not None:
            raise TranscodeError(f"QuantizedWeight -> QQQ: {reason}")
        scales = weight.scales.astype(np.float32)
        if weight.group_size == -1:
            if s_channel is not None:
                raise TranscodeError("QuantizedWeight -> QQQ: s_channel is derived for group_size -1; do not pass it")
            result = cls(weight.codes.copy(), None, (scales[0] / CHANNEL_FACTOR).astype(np.float32), -1)
        else:
            if s_channel is None:
                raise TranscodeError(
                    "QuantizedWeight -> QQQ: a grouped weight needs s_channel [out] (the per-channel level)"
                )
            channel = np.asarray(s_channel, dtype=np.float32).reshape(-1)
            s_group = (scales / channel[None, :]).astype(np.float16)
            result = cls(weight.codes.copy(), s_group, channel, weight.group_size)
        changed = int(np.count_nonzero(result.dequantize() != weight.dequantize()))
        if changed:
            raise TranscodeError(f"QuantizedWeight -> QQQ: {changed} weights would change value")
        return result


def _shape_reason(weight: QuantizedWeight) -> str | None:
    """Why QQQ's code model cannot hold ``weight`` (``None`` when it can; values are checked later)."""
    if weight.bits != 4:
        return f"QQQ stores 4-bit codes only; the weight is {weight.bits}-bit"
    if not bool(np.all(weight.zeros == ZERO)):
        return f"QQQ is symmetric with zero point {ZERO}; the weight has other zero points"
    if not weight.has_default_g_idx():
        return "QQQ has no g_idx tensor, so it cannot hold an act-order (permuted) group map"
    if weight.group_size != -1 and weight.in_features % weight.group_size:
        return f"QQQ needs in_features divisible by group_size; in={weight.in_features}, group={weight.group_size}"
    return None
