"""AWQ: activation-aware scaling of input channels, clipping, and quantization with the AWQ formulas.

The flow for one scaling group (a previous op, the linears it feeds, and the block to inspect):

1. :func:`search_scales` picks per-input-channel scales ``s [in]`` minimising the block's output error
   when every weight is replaced by ``Q(W · s) / s``.
2. :func:`scale_consumer_weight` multiplies each consumer's input columns by ``s`` and
   :func:`fold_scales_into_previous` divides the previous op's output by ``s`` (the product is unchanged).
3. :func:`~qalgos.awq_clip.search_clip` (skipped for query/key projections) bounds each group's range.
4. :func:`quantize_awq` returns the scaled, clipped weight's logical quantized form.

:func:`quantize_scaled_group` runs steps 1-4 for a group. All math runs in float32; results are cast
back to the input dtypes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from .awq_clip import apply_clip, clip_allowed, search_clip
from .errors import NumericalError, ShapeError, SpecError
from .group_params import awq_codes_, awq_params
from .result import QuantResult, build_logical, check_weight, stored_dequantized
from .rtn import natural_g_idx, quantize_groups
from .scratch_buffers import ScratchBuffers
from .spec import QuantSpec

ForwardWith = Callable[[list[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class ScaleSearchResult:
    """``scales [in]`` float32 (multiply consumer input columns, divide the previous op); ``ratio``: the
    winning grid exponent; ``loss``: the block output MSE at that ratio."""

    scales: torch.Tensor
    ratio: float
    loss: float


def _check_awq_spec(spec: QuantSpec) -> None:
    if spec.desc_act or spec.act_group_aware:
        raise SpecError("desc_act/act_group_aware: AWQ keeps the natural column order; set both to False")


def fake_quantize_awq(weight: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """AWQ pseudo-quantization of ``weight [out, in]``: float32 ``[out, in]`` dequantized values.

    When every group is full, all ``out * G`` groups go through the AWQ formulas as the rows of one
    ``[out * G, width]`` view (row min/max and elementwise math only, so the values equal the per-group
    loop's); a partial last group takes the per-group loop.
    """
    w = weight.to(torch.float32)
    in_ = w.shape[1]
    width = spec.group_width(in_)
    if in_ % width:
        return quantize_groups(w, spec, awq_params)[3]
    return fake_quantize_awq_(w.clone(memory_format=torch.contiguous_format), spec)


def fake_quantize_awq_(w: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """:func:`fake_quantize_awq` of a float32 ``w [out, in]`` that the caller gives up, written into ``w``
    itself when every group is full: the same operations in the same order (``round(w / scale) + zero``,
    clamped, then ``(code - zero) * scale``), so the same values, without the five ``[out, in]`` temporaries.
    A partial last group returns a new tensor (the per-group loop)."""
    out, in_ = w.shape
    width = spec.group_width(in_)
    if in_ % width or w.dtype != torch.float32 or not w.is_contiguous():
        return fake_quantize_awq(w, spec)
    rows = w.view(out * (in_ // width), width)
    scale, zero = awq_codes_(rows, spec)
    rows.sub_(zero[:, None]).mul_(scale[:, None])
    return w


def weight_importance(weights: Sequence[torch.Tensor], spec: QuantSpec) -> torch.Tensor:
    """``w_mean [in]``: mean over all rows of ``|w|`` normalised by its quantization group's absmax."""
    w = torch.cat([wj.detach().to(torch.float32) for wj in weights], dim=0).abs()
    in_ = w.shape[1]
    g_idx = torch.arange(in_, device=w.device) // spec.group_width(in_)
    group_max = torch.stack([w[:, g_idx == g].amax(dim=1) for g in range(spec.groups(in_))], dim=1)  # [rows, G]
    normalised = w / group_max[:, g_idx].clamp(min=torch.finfo(torch.float32).tiny)
    return normalised.mean(dim=0)


def _output_mse(reference64: torch.Tensor, output: torch.Tensor, scratch: ScratchBuffers | None = None) -> float:
    """Mean of ``(reference - output)**2`` in float64; ``reference64`` is the reference already in float64
    (converted once per search). One float64 buffer, reused in place for the difference and its square (the
    ``scratch`` tensor ``output_diff`` when given, else a fresh one per call): the same elementwise operations
    and reduction as the plain expression, so the same value."""
    if tuple(output.shape) != tuple(reference64.shape):
        raise ShapeError(
            f"forward_with: expected an output of shape {tuple(reference64.shape)}, found {tuple(output.shape)}"
        )
    if scratch is None:
        diff = output.to(torch.float64, copy=True)
    else:
        diff = scratch.take("output_diff", output.shape, torch.float64, output.device).copy_(output)
    torch.sub(reference64, diff, out=diff)
    return float(diff.square_().mean())


def search_statistics(
    x: torch.Tensor, weights: Sequence[torch.Tensor], spec: QuantSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_mean [in], w_mean [in])`` of a scale search, after checking the spec, that ``weights`` are
    ``[out_j, in]`` with one ``in`` and that ``x`` is ``[..., in]``: ``x_mean = mean |x|`` per input
    channel (float32), ``w_mean`` from :func:`weight_importance`."""
    _check_awq_spec(spec)
    if not weights:
        raise ShapeError("weights: expected at least one [out, in] weight to scale, found none")
    in_ = weights[0].shape[-1]
    for j, wj in enumerate(weights):
        check_weight(wj, f"weights[{j}]")
        if wj.shape[1] != in_:
            raise ShapeError(f"weights[{j}]: expected [out, {in_}] like weights[0], found {tuple(wj.shape)}")
    if x.shape[-1] != in_:
        raise ShapeError(f"x: expected [..., {in_}] activations, found {tuple(x.shape)}")
    x_mean = x.detach().reshape(-1, in_).to(torch.float32).abs().mean(dim=0)
    return x_mean, weight_importance(weights, spec)


def search_scales(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    forward_with: ForwardWith,
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
    reference: torch.Tensor | None = None,
    scratch: ScratchBuffers | None = None,
) -> ScaleSearchResult:
    """Grid search of ``s = x_mean**r / (w_mean**(1-r) + 1e-4)`` for ``r = i / grid``.

    ``x [..., in]``: the inputs of the scaled linears; ``weights``: their ``[out_j, in]`` weights;
    ``forward_with(weights)``: the inspected block's output with those weights substituted (the caller
    owns the model). ``reference``: the block's full-precision output if already known. Each candidate is
    clamped to >= 1e-4, normalised by ``sqrt(max * min)``, and non-finite entries are set to 1.
    ``scratch``: float32 trial weights and the loss's float64 difference are written into its tensors ratio
    after ratio (the same values): a trial handed to ``forward_with`` is overwritten by the next ratio's, so
    ``forward_with`` copies it out and keeps no reference to it.
    """
    x_mean, w_mean = search_statistics(x, weights, spec)
    if reference is None:
        reference = forward_with(list(weights))
    reference64 = reference.detach().to(torch.float64)
    return best_on_grid(
        x_mean,
        w_mean,
        weights,
        spec,
        lambda trial: _output_mse(reference64, forward_with(trial), scratch),
        grid,
        duo_scaling,
        scratch,
    )


def grid_scales(x_mean: torch.Tensor, w_mean: torch.Tensor, ratio: float, duo_scaling: bool = True) -> torch.Tensor:
    """The candidate scales ``[in]`` (float32) of one grid ratio: ``x_mean**r / (w_mean**(1-r) + 1e-4)``
    (``x_mean**r`` without duo scaling), clamped to >= 1e-4, normalised by ``sqrt(max * min)``, and
    non-finite entries set to 1."""
    if duo_scaling:
        scales = x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4)
    else:
        scales = x_mean.pow(ratio)
    scales = scales.clamp(min=1e-4)
    scales = scales / (scales.max() * scales.min()).sqrt()
    return torch.where(torch.isfinite(scales), scales, torch.ones_like(scales))


def grid_trial(
    weights: Sequence[torch.Tensor], scales: torch.Tensor, spec: QuantSpec, scratch: ScratchBuffers | None = None
) -> list[torch.Tensor]:
    """The trial weights ``Q(W * s) / s`` of one grid ratio's ``scales [in]``, each in its weight's dtype.
    ``scratch``: float32 trials are written into its tensors ``trial0``, ``trial1`` ... (the same values; the
    previous ratio's trial is overwritten, so use each before asking for the next)."""
    if scratch is None:
        return [fake_quantize_awq_(wj.to(torch.float32) * scales, spec).div_(scales).to(wj.dtype) for wj in weights]
    trials = []
    for j, wj in enumerate(weights):
        buffer = scratch.take(f"trial{j}", wj.shape, torch.float32, wj.device)
        product = torch.mul(wj.to(torch.float32), scales, out=buffer)
        trials.append(fake_quantize_awq_(product, spec).div_(scales).to(wj.dtype))
    return trials


def best_on_grid(
    x_mean: torch.Tensor,
    w_mean: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    loss_of: Callable[[list[torch.Tensor]], float],
    grid: int = 20,
    duo_scaling: bool = True,
    scratch: ScratchBuffers | None = None,
) -> ScaleSearchResult:
    """The grid ratio ``r = i / grid`` whose trial weights ``Q(W * s) / s`` (in each weight's dtype) give the
    lowest ``loss_of(trial)``; the first of equal losses wins and a NaN loss never does. ``scratch``: as in
    :func:`grid_trial` (each trial overwritten by the next ratio's)."""
    scored = []
    for i in range(grid):
        ratio = i / grid
        trial = grid_trial(weights, grid_scales(x_mean, w_mean, ratio, duo_scaling), spec, scratch)
        scored.append((ratio, loss_of(trial)))
    return best_on_grid_from(x_mean, w_mean, scored, grid, duo_scaling)


def best_on_grid_from(
    x_mean: torch.Tensor,
    w_mean: torch.Tensor,
    scored: Sequence[tuple[float, float]],
    grid: int,
    duo_scaling: bool = True,
) -> ScaleSearchResult:
    """The search result of the lowest loss among ``scored`` ``(ratio, loss)`` pairs in ratio order (the first
    of equal losses wins, a NaN loss never does), its scales rebuilt by :func:`grid_scales`. ``grid``: the
    grid's size, for the error when every loss is NaN."""
    best: tuple[float, float] | None = None
    for ratio, loss in scored:
        if loss == loss and (best is None or loss < best[0]):  # NaN never wins
            best = (loss, ratio)
    if best is None:
        raise NumericalError(f"AWQ scale search: every one of the {grid} ratios gave a NaN output loss")
    return ScaleSearchResult(grid_scales(x_mean, w_mean, best[1], duo_scaling), best[1], best[0])


def scale_consumer_weight(weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``weight [out, in] * scales[None, :]`` (a new tensor in ``weight``'s dtype)."""
    if weight.ndim != 2 or scales.shape != (weight.shape[1],):
        found = tuple(scales.shape)
        raise ShapeError(f"scales: expected [{weight.shape[-1]}] for weight {tuple(weight.shape)}, found {found}")
    return (weight.to(torch.float32) * scales.to(torch.float32)[None, :]).to(weight.dtype)


def fold_scales_into_previous(
    weight: torch.Tensor, bias: torch.Tensor | None, scales: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Divide the previous op's output channels by ``scales [n]``; returns new ``(weight, bias)``.

    ``weight`` is a norm's ``[n]`` or a linear's ``[rows, k]`` with ``rows >= n``: only the last ``n``
    rows are divided (a fused projection whose tail feeds the consumers). ``bias`` ``[rows]`` likewise.
    """
    n = scales.shape[0]
    if scales.ndim != 1 or weight.ndim not in (1, 2) or weight.shape[0] < n:
        raise ShapeError(
            f"weight: expected [>= {n}] or [>= {n}, k] to fold scales [{n}] into, found {tuple(weight.shape)}"
        )
    s = scales.to(torch.float32)
    new_weight = weight.to(torch.float32).clone()
    new_weight[-n:] = new_weight[-n:] / (s if weight.ndim == 1 else s[:, None])
    new_bias = None
    if bias is not None:
        if bias.shape != (weight.shape[0],):
            raise ShapeError(f"bias: expected [{weight.shape[0]}], found {tuple(bias.shape)}")
        new_bias = bias.to(torch.float32).clone()
        new_bias[-n:] = new_bias[-n:] / s
        new_bias = new_bias.to(bias.dtype)
    return new_weight.to(weight.dtype), new_bias


def fold_scales_into_quantized(result: QuantResult, scales: torch.Tensor) -> QuantResult:
    """:func:`fold_scales_into_previous` for a previous linear that is already quantized: its last ``n`` output
    rows divided by ``scales [n]``, done on the stored form (each row's group scales divided, codes and zero
    points kept; every integer quantizer here, GPTQ with its range search included, picks the same codes for a
    positively scaled row, so this is that row quantized after the fold, up to float rounding). Stored scales
    keep their dtype, clamped to its finite range; ``dequantized`` is recomputed from them (the input's dtype).
    ``loss``, ``damp``, ``nsamples`` and ``fallback`` are the original solve's."""
    weight = result.weight
    n = int(scales.shape[0]) if scales.ndim == 1 else -1
    if n < 1 or n > weight.scales.shape[1]:
        raise ShapeError(
            f"scales: expected [n] with 1 <= n <= {weight.scales.shape[1]} (output rows of the quantized weight), "
            f"found {tuple(scales.shape)}"
        )
    divisor = scales.detach().to(device="cpu", dtype=torch.float32).numpy()
    stored = weight.scales.astype(np.float32)
    stored[:, -n:] = stored[:, -n:] / divisor[None, :]
    limits = np.finfo(weight.scales.dtype)
    stored = np.clip(stored, float(limits.tiny), float(limits.max)).astype(weight.scales.dtype)
    logical = replace(weight, scales=np.ascontiguousarray(stored))
    dequantized = stored_dequantized(logical, result.dequantized)
    return QuantResult(logical, dequantized, result.loss, result.damp, result.nsamples, result.fallback)


def quantize_awq(weight: torch.Tensor, spec: QuantSpec, clip: torch.Tensor | None = None) -> QuantResult:
    """AWQ-formula quantization of an (already scaled) ``weight [out, in]``, clamped to ``±clip [out, G]``
    first when given. ``loss`` is the mean squared error against the unclipped input weight."""
    _check_awq_spec(spec)
    check_weight(weight)
    w = weight.detach().to(torch.float32)
    if w.shape[1] % spec.group_width(w.shape[1]):
        source = apply_clip(w, clip, spec) if clip is not None else w
        codes, scales, zeros, _ = quantize_groups(source, spec, awq_params)
    else:
        codes, scales, zeros = awq_codes_full_groups(w, clip, spec)
    logical = build_logical(codes, scales, zeros, natural_g_idx(w.shape[1], spec), spec, {"algorithm": "awq"})
    deq = stored_dequantized(logical, w)
    diff = torch.sub(deq, w, out=codes)  # the codes are stored: their float32 scratch takes the difference
    loss = float(diff.square_().mean())
    return QuantResult(logical, deq.to(weight.dtype), loss, None, 0, None)


def awq_codes_full_groups(
    w: torch.Tensor, clip: torch.Tensor | None, spec: QuantSpec
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``quantize_groups(apply_clip(w, clip, spec) or w, spec, awq_params)[:3]`` for a float32 ``w [out, in]``
    whose groups are all full: float codes ``[out, in]``, ``scales`` and ``zeros [G, out]`` float32. Every group
    is a row of one ``[out * G, width]`` view of a single scratch copy (clamped to ``±clip [out, G]`` when given),
    turned into its codes in place with :func:`~qalgos.group_params.codes_of`'s operations in their order: the
    same values without the per-group temporaries (each a fresh mapping, faulted in page by page)."""
    out, in_ = w.shape
    width = spec.group_width(in_)
    groups = in_ // width
    codes = torch.empty(out, in_, dtype=torch.float32, device=w.device)
    runs = codes.view(out, groups, width)
    if clip is None:
        runs.copy_(w.reshape(out, groups, width))
    else:
        if tuple(clip.shape) != (out, groups):
            raise ShapeError(f"clip: expected [out, G] = {(out, groups)}, found {tuple(clip.shape)}")
        bound = clip.to(device=w.device, dtype=torch.float32)[:, :, None]
        torch.clamp(w.reshape(out, groups, width), -bound, bound, out=runs)
    scale, zero = awq_codes_(codes.view(out * groups, width), spec)
    return codes, scale.view(out, groups).T.contiguous(), zero.view(out, groups).T.contiguous()


@dataclass(frozen=True)
class ScaledGroupResult:
    """The AWQ outcome of one scaling group: the search, the scaled weights, and one result per layer
    (``clipped[j]`` says whether layer ``j`` went through the clip search)."""

    search: ScaleSearchResult
    scaled_weights: list[torch.Tensor]
    results: list[QuantResult]
    clipped: list[bool]


def quantize_scaled_group(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    names: Sequence[str],
    forward_with: ForwardWith,
    spec: QuantSpec,
    clip: bool = True,
) -> ScaledGroupResult:
    """Scale search, scaling, clip search (not for query/key projections) and quantization for linears
    ``weights`` (named ``names``) that all read ``x [..., in]``. The caller folds ``search.scales`` into the
    previous op with :func:`fold_scales_into_previous`."""
    if len(names) != len(weights):
        raise ShapeError(f"names: expected one name per weight ({len(weights)}), found {len(names)}")
    search = search_scales(x, weights, forward_with, spec)
    scaled_x = x.detach().reshape(-1, x.shape[-1]).to(torch.float32) / search.scales
    scaled = [scale_consumer_weight(w, search.scales) for w in weights]
    results, clipped = [], []
    for name, w in zip(names, scaled, strict=True):
        use_clip = clip and clip_allowed(name)
        bound = search_clip(w, scaled_x, spec) if use_clip else None
        results.append(quantize_awq(w, spec, bound))
        clipped.append(use_clip)
    return ScaledGroupResult(search, scaled, results, clipped)
