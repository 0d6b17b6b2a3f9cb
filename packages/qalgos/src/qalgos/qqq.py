"""QQQ (W4A8): GPTQ's column solve on QQQ's 4-bit grids, split into QQQ's two scale levels.

Follows GPT-QModel 7.7.0's QQQ quantizer (``quantization/qqq.py``, ``looper/qqq_processor.py`` and the
``QQQLinear.pack`` it feeds). What differs from plain GPTQ:

* Grids. Grouped (``group_size > 0``): GPTQ's symmetric grid, ``scale = 2 * absmax / 15`` per group, codes
  ``clamp(round(w / scale) + 8, 0, 15)``. Per-channel (``group_size == -1``): a *signed* grid,
  ``scale = absmax / 7`` per output channel from the weight before the solve, codes ``clamp(round(w /
  scale), -7, 7)`` (stored as ``code = value + 8`` in ``[1, 15]``).
* No act-order, no group-aware reordering (the reference's QQQ solve visits columns in natural order),
  damping ``damp_percent = 0.005`` and ``damp_auto_increment = 0.001`` (:func:`qqq_spec`).
* The two scale levels (:func:`to_qqq_weight`): grouped weights get an int8 channel scale
  ``s_channel = absmax(original row) / 127`` (an all-zero row: ``1 / 127``) and float16 group scales
  ``s_group = float16(scale / s_channel)``; a weight whose one group spans the whole input (``-1`` or
  ``group_size == in``) is stored per-channel with ``s_channel = scale / 16``.

The result's ``weight`` is a ``qformats.layouts.qqq.QQQWeight`` and ``dequantized`` is its
``dequantize()`` (the int8 re-rounding ``clip(round((code - 8) * s_group), -128, 127)`` included): what the
checkpoint computes, and what later layers are calibrated on. The reference hands later layers the solve's
float32 ``scale * (code - 8)`` instead; the two differ only by that int8 rounding.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from qformats.layouts.qqq import QQQWeight
from qformats.logical import QuantizedWeight

from .column_order import ColumnPlan
from .errors import ShapeError, SpecError
from .fallback import FallbackPolicy
from .gptq import GPTQ
from .gptq_solve import SolveOutput, solve
from .result import QuantResult, build_logical, check_weight
from .rtn import quantize_rtn
from .spec import QuantSpec

QQQ_BITS = 4
ZERO = 8
CHANNEL_MAXQ = 7  # the per-channel grid's signed range is [-7, 7]
INT8_MAX = 127
QQQ_DAMP_PERCENT = 0.005
QQQ_DAMP_AUTO_INCREMENT = 0.001


def qqq_spec(group_size: int = 128, **overrides: object) -> QuantSpec:
    """The reference's QQQ spec: 4-bit symmetric, natural column order, damping 0.005 (+0.001 per retry),
    float32 scales (QQQ's group scales are divided by the channel scale before they are rounded)."""
    fields: dict[str, object] = {
        "bits": QQQ_BITS,
        "group_size": group_size,
        "sym": True,
        "damp_percent": QQQ_DAMP_PERCENT,
        "damp_auto_increment": QQQ_DAMP_AUTO_INCREMENT,
    }
    fields.update(overrides)
    spec = QuantSpec(**fields)  # type: ignore[arg-type]
    check_qqq_spec(spec)
    return spec


def check_qqq_spec(spec: QuantSpec, in_features: int | None = None) -> None:
    """Raise :class:`SpecError` naming the field when ``spec`` is not a QQQ spec (for ``in_features``)."""
    if spec.bits != QQQ_BITS:
        raise SpecError(f"bits: QQQ stores 4-bit weights, found {spec.bits}")
    if not spec.sym:
        raise SpecError("sym: QQQ is symmetric (codes around the fixed zero 8), found sym=False")
    if spec.desc_act or spec.act_group_aware:
        raise SpecError("desc_act / act_group_aware: QQQ has no g_idx and solves columns in natural order")
    if spec.scale_dtype != "float32":
        raise SpecError(f"scale_dtype: QQQ splits float32 scales into its two levels, found {spec.scale_dtype!r}")
    if spec.mse != 0.0:
        raise SpecError(f"mse: lowbit's QQQ has no shrink search (use mse 0), found {spec.mse!r}")
    if in_features is not None and spec.group_size != -1 and in_features % spec.group_size:
        raise SpecError(
            f"group_size: QQQ needs in_features divisible by group_size; in={in_features}, group={spec.group_size}"
        )


def channel_params(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """QQQ's per-channel grid of ``weight [out, in]`` float32: ``scale = absmax / 7`` (an all-zero row:
    ``1 / 7``) and ``zero = 8`` per row, both float32 ``[out]``."""
    zero_t = torch.zeros(weight.shape[0], dtype=torch.float32)
    xmax = torch.maximum(torch.minimum(weight.amin(dim=1), zero_t).abs(), torch.maximum(weight.amax(dim=1), zero_t))
    xmax = torch.where(xmax == 0, torch.ones_like(xmax), xmax)
    return xmax / CHANNEL_MAXQ, torch.full_like(xmax, float(ZERO))


def int8_channel_scale(weight: torch.Tensor) -> np.ndarray:
    """float32 ``[out]``: the int8 channel scale ``absmax / 127`` of ``weight [out, in]`` (zero row: 1/127)."""
    xmax = weight.detach().to(device="cpu", dtype=torch.float32).abs().amax(dim=1)
    xmax = torch.where(xmax == 0, torch.ones_like(xmax), xmax)
    return (xmax / INT8_MAX).numpy().astype(np.float32)


def to_qqq_weight(weight: QuantizedWeight, original: torch.Tensor) -> QQQWeight:
    """The QQQ weight of a solved symmetric 4-bit ``weight`` (float32 scales, zero 8, natural groups);
    ``original [out, in]`` is the weight before the solve (its rows give the grouped int8 channel scale)."""
    scales = np.asarray(weight.scales, dtype=np.float32)
    if weight.group_size in (-1, weight.in_features):
        return QQQWeight(weight.codes.copy(), None, (scales[0] / np.float32(16.0)).astype(np.float32), -1)
    s_channel = int8_channel_scale(original)
    s_group = (scales / s_channel[None, :]).astype(np.float16)
    return QQQWeight(weight.codes.copy(), s_group, s_channel, weight.group_size)


def qqq_result(result: QuantResult, original: torch.Tensor) -> QuantResult:
    """``result`` with its weight as a :class:`QQQWeight` and ``dequantized`` its dense weight."""
    qqq = to_qqq_weight(result.weight, original)
    dense = torch.from_numpy(qqq.dequantize()).to(device=original.device, dtype=original.dtype)
    return replace(result, weight=qqq, dequantized=dense)  # type: ignore[arg-type]


def quantize_qqq_rtn(weight: torch.Tensor, spec: QuantSpec, fallback: str | None = None) -> QuantResult:
    """Round-to-nearest on QQQ's grids (the reference's fallback), as a QQQ result (loss: mean squared error)."""
    check_weight(weight)
    check_qqq_spec(spec, int(weight.shape[1]))
    if spec.group_size != -1:
        return qqq_result(quantize_rtn(weight, spec, fallback=fallback), weight)
    w = weight.detach().to(device="cpu", dtype=torch.float32)
    scale, zero = channel_params(w)
    codes = torch.clamp(torch.round(w / scale[:, None]) + zero[:, None], ZERO - CHANNEL_MAXQ, spec.maxq)
    meta: dict[str, object] = {"algorithm": "rtn"}
    if fallback is not None:
        meta["fallback"] = fallback
    g_idx = torch.zeros(w.shape[1], dtype=torch.int32)
    logical = build_logical(codes, scale[None, :], zero[None, :], g_idx, spec, meta)
    result = qqq_result(QuantResult(logical, w, 0.0, None, 0, fallback), weight)
    loss = float(((result.dequantized.float() - w.to(result.dequantized.device)) ** 2).mean())
    return replace(result, loss=loss)


class QQQ(GPTQ):
    """GPTQ accumulator whose solve uses QQQ's grids and returns QQQ weights (see the module docstring).

    ``quantize(weight [out, in])`` returns a :class:`QuantResult` whose ``weight`` is a ``QQQWeight``; a
    fallback (no token, too few tokens under a policy, an unfactorisable Hessian) is RTN on QQQ's grids.
    """

    algorithm = "qqq"

    def __init__(self, in_features: int, spec: QuantSpec) -> None:
        check_qqq_spec(spec, in_features)
        super().__init__(in_features, spec)
        self._channel: tuple[torch.Tensor, torch.Tensor] | None = None

    def quantize(
        self,
        weight: torch.Tensor,
        total_tokens: int | None = None,
        policy: FallbackPolicy | None = None,
        *,
        release_statistics: bool = False,
    ) -> QuantResult:
        """Solve ``weight [out, in]`` as :meth:`GPTQ.quantize` does, on QQQ's grids (see the class)."""
        check_weight(weight)
        if weight.shape[1] != self.in_features:
            raise ShapeError(
                f"weight: expected [out, {self.in_features}] (in_features of this QQQ), found {tuple(weight.shape)}"
            )
        if self.spec.group_size == -1:  # from the weight as given, before dead columns are zeroed
            self._channel = channel_params(weight.detach().to(device="cpu", dtype=torch.float32))
        try:
            result = super().quantize(weight, total_tokens, policy, release_statistics=release_statistics)
        finally:
            self._channel = None
        if result.fallback is not None:
            rtn = quantize_qqq_rtn(weight, self.spec, result.fallback)
            return replace(rtn, nsamples=result.nsamples)
        return qqq_result(result, weight)

    def _column_solve(
        self,
        wt: torch.Tensor,
        upper: torch.Tensor,
        plan: ColumnPlan,
        dead: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor,
    ) -> SolveOutput:
        if self.spec.group_size != -1:
            return solve(wt, upper, plan, self.spec, scales, zeros)
        if self._channel is None:
            raise SpecError("QQQ: the per-channel grid is set by quantize(); _column_solve was called directly")
        scales[0], zeros[0] = self._channel
        return solve(wt, upper, plan, self.spec, scales, zeros, min_code=ZERO - CHANNEL_MAXQ)
