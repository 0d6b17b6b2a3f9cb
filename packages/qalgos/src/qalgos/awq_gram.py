"""AWQ scale search for linears inspected on their own outputs, with the loss in Gram form.

When the inspected block is the scaled linears themselves (``o_proj``, ``down_proj``: no ``inspect``
module), the block output error of a trial ``W_q`` is linear in the weight difference ``D = W - W_q``:
``mean((x Wᵀ - x W_qᵀ)²) = tr(D G Dᵀ) / (tokens · out)`` with ``G = xᵀx [in, in]``. ``G`` is built once
per search (float32 GEMMs over the tokens, held in float64); each grid ratio then costs an
``[out, in] x [in, in]`` product instead of a ``[tokens, in] x [in, out]`` forward plus the loss, which
is cheaper whenever ``in < tokens`` (SmolLM2's ``down_proj`` at 8192 tokens: 5x fewer FLOPs per ratio).

The chosen ratio is the one the output-form search (:func:`qalgos.awq.search_scales`) would choose up to
float rounding of the loss: the two losses are equal in exact arithmetic, so only ratios whose losses
agree to about 1e-6 relative can swap (tested on random and outlier-heavy inputs).

Every ratio is scored first with the same loss in reduced precision (:func:`reduced_output_mse`: the product
``D G`` on the Gram form, or ``x Dᵀ`` on the recorded inputs when they have fewer rows than ``in``, whichever is
fewer FLOPs): in bfloat16 on a CPU with native bfloat16 dot products (:func:`native_bfloat16`), then in float32
for the ratios near the bfloat16 best, then in float64 for those near the float32 best, chosen by float64
(:func:`qalgos.awq_rescored_grid.best_on_grid_rescored`, which states each tier's error estimate and when the
choice can differ from scoring all 20 in float64): at ``in`` = 14336 a float64 product is 1.7 TFLOP, its
float32 one about half the time and its bfloat16 one about a fifth (a fifteenth with AMX). Where the float32 tier
scores enough ratios to pay for it (:func:`factor_pays`), it scores them through the Gram matrix's lower Cholesky
factor ``L`` instead (:func:`factor_output_mse`: ``‖D L‖²``, the zero triangle skipped: 0.57x of ``D G``'s time
at ``in`` = 14336, the factorisation costing about 1.8 ratios' savings); a Gram matrix that is not positive
definite in float32 (a dead input) is scored through itself. The reduced copies of the Gram matrix and the
factor (:class:`ReducedOperands`) are made from the float64 one when a tier needs them, one at a time, and
dropped before a float64 product. ``rescore=False`` scores every ratio in float64.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch

from .awq import ScaleSearchResult, best_on_grid, search_statistics
from .awq_rescored_grid import RescoreCount, best_on_grid_rescored
from .hessian import add_gram
from .hessian_inverse import LEAF, cholesky_in_place
from .scratch_buffers import ScratchBuffers
from .spec import QuantSpec


def float32_rows(x: torch.Tensor) -> torch.Tensor:
    """Inputs ``x [..., in]`` as float32 rows ``[tokens, in]`` (``x`` itself when it already is)."""
    return x.detach().reshape(-1, x.shape[-1]).to(torch.float32)


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """``G = xᵀx`` ``[in, in]`` float64 of inputs ``x [..., in]``: float32 GEMMs over the tokens into the blocks of
    its lower triangle, mirrored (:func:`qalgos.hessian.add_gram`: one product under 2048 inputs; at 14336, 36/64 of
    a full ``xᵀx``'s multiply-adds and no ``[in, in]`` float32 matrix beside the result). Each value is a float32
    dot product over every token, held exactly in float64."""
    rows = float32_rows(x)
    gram = torch.zeros(rows.shape[1], rows.shape[1], dtype=torch.float64, device=rows.device)
    add_gram(gram, rows)
    return gram


def gram_output_mse(
    gram: torch.Tensor,
    tokens: int,
    weights: Sequence[torch.Tensor],
    trial: Sequence[torch.Tensor],
    scratch: ScratchBuffers | None = None,
) -> float:
    """Mean over ``tokens x sum(out_j)`` of the squared output difference of ``weights`` and ``trial``
    (each ``[out_j, in]``) on the inputs whose Gram matrix is ``gram [in, in]`` float64. ``scratch``: the float64
    difference and product are written into its tensors ``diff64`` and ``product64`` (the same values)."""
    scratch = scratch or ScratchBuffers()
    total = torch.zeros((), dtype=torch.float64)
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        shape = (int(wj.shape[0]), int(wj.shape[1]))
        diff = scratch.take("diff64", shape, torch.float64, wj.device).copy_(wj).sub_(tj)
        product = torch.mm(diff, gram, out=scratch.take("product64", shape, torch.float64, wj.device))
        total += product.mul_(diff).sum()
        outputs += int(wj.shape[0])
    return float(total / (tokens * outputs))


def reduced_output_mse(
    operand: torch.Tensor,
    form: Literal["gram", "rows"],
    tokens: int,
    weights: Sequence[torch.Tensor],
    trial: Sequence[torch.Tensor],
    scratch: ScratchBuffers | None = None,
) -> float:
    """:func:`gram_output_mse` with its product in ``operand``'s dtype (float32 or bfloat16). ``form``
    ``"gram"``: ``operand`` is the Gram matrix ``[in, in]`` and the product ``D G``; ``"rows"``: ``operand`` is
    the recorded inputs ``[tokens, in]`` and the product ``x Dᵀ`` (fewer FLOPs when ``tokens < in``). ``D`` is
    formed in float32 and rounded to ``operand``'s dtype for the product; the product (widened to float32) is
    multiplied by the float32 ``D`` (or squared) and summed in float64. In bfloat16 the product's inputs and
    output are rounded to bfloat16 (torch's CPU bfloat16 GEMM accumulates in float32 and returns bfloat16).
    ``scratch``: ``D``, its rounding and the products are written into its tensors ``diff``, ``diff_low``,
    ``product_low`` and ``product`` (the same values) instead of fresh ones."""
    scratch = scratch or ScratchBuffers()
    total = 0.0
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        out_j, in_ = int(wj.shape[0]), int(wj.shape[1])
        diff = torch.sub(
            wj.to(torch.float32), tj.to(torch.float32), out=scratch.take("diff", (out_j, in_), torch.float32, wj.device)
        )
        low = diff
        if operand.dtype != torch.float32:
            low = scratch.take("diff_low", (out_j, in_), operand.dtype, wj.device).copy_(diff)
        shape = (out_j, in_) if form == "gram" else (int(operand.shape[0]), out_j)
        product = scratch.take("product", shape, torch.float32, wj.device)
        product_low = product
        if operand.dtype != torch.float32:
            product_low = scratch.take("product_low", shape, operand.dtype, wj.device)
        if form == "gram":
            torch.mm(low, operand, out=product_low)
        else:
            torch.mm(operand, low.T, out=product_low)
        if product_low is not product:
            product.copy_(product_low)
        product = product.mul_(diff) if form == "gram" else product.square_()
        total += float(product.sum(dtype=torch.float64))
        outputs += out_j
    return total / (tokens * outputs)


def factor_output_mse(
    factor: torch.Tensor,
    tokens: int,
    weights: Sequence[torch.Tensor],
    trial: Sequence[torch.Tensor],
    scratch: ScratchBuffers | None = None,
) -> float:
    """:func:`gram_output_mse` in float32 through the lower Cholesky factor ``L`` of the Gram matrix (``factor
    [in, in]`` float32, ``G = L Lᵀ``, zero above the diagonal): ``tr(D G Dᵀ) = ‖D L‖²``. ``D L`` is formed block
    column by block column over :data:`qalgos.hessian_inverse.LEAF` (columns ``s:e`` are ``D[:, s:] L[s:, s:e]``:
    the zero triangle is skipped, ``(k + 1) / 2k`` of ``D G``'s multiply-adds with ``k`` blocks, 15/28 at ``in`` =
    14336), each block squared and summed in float64. Every term of the sum is a square, so float32 rounding
    does not cancel as it can in ``D G`` times ``D``. ``scratch``: ``D`` and the blocks are written into its
    tensors ``diff`` and ``factor_product``."""
    scratch = scratch or ScratchBuffers()
    in_ = int(factor.shape[0])
    edges = [*range(0, in_, LEAF), in_]
    total = 0.0
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        out_j = int(wj.shape[0])
        diff = torch.sub(
            wj.to(torch.float32), tj.to(torch.float32), out=scratch.take("diff", (out_j, in_), torch.float32, wj.device)
        )
        for s, e in itertools.pairwise(edges):
            block = scratch.take("factor_product", (out_j, e - s), torch.float32, wj.device)
            torch.mm(diff[:, s:], factor[s:, s:e], out=block)
            total += float(block.square_().sum(dtype=torch.float64))
        outputs += out_j
    return total / (tokens * outputs)


#: :func:`factor_pays`' break-even, measured (``benchmarks/bench_awq_scale_search.py --stages``, an 8B ``down_proj``,
#: out 4096, in 14336, 2-core Intel Xeon with AMX): a float32 loss through the factor took 6.4 CPU s against 11.4
#: through the Gram matrix, the factorisation 8.7, so it pays from 1.8 ratios: ``count · out >= 0.5 · in``.
FACTOR_BREAK_EVEN = 0.5


def factor_pays(count: int, outputs: int, in_: int) -> bool:
    """Whether scoring ``count`` ratios of linears with ``outputs`` rows in all and ``in_`` inputs through the Gram
    matrix's Cholesky factor is cheaper than through the Gram matrix, the factorisation included:
    ``count · outputs >= FACTOR_BREAK_EVEN · in_``."""
    return count * outputs >= FACTOR_BREAK_EVEN * in_


#: The narrowest ``in`` the automatic bfloat16 tier is used for: at SmolLM2's 576 / 1536 it saved nothing (3.6 against
#: 3.6 CPU s) or cost 1.4x on a flat loss curve; at 4096 it took 0.77x and at 14336 0.72x of the float32-first search.
BFLOAT16_MIN_WIDTH = 4096


@functools.cache
def native_bfloat16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (x86 ``avx512_bf16`` or ``amx_bf16``, Arm
    ``bf16``; read from ``/proc/cpuinfo``, False where it cannot be read), where torch's bfloat16 GEMM is
    about twice float32's speed; elsewhere it is emulated and slower than float32."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


class ReducedOperands:
    """The reduced-precision copies of a search's float64 Gram matrix (or float32 input rows, ``form``
    ``"rows"``) that its tiers read, at most one alive at a time: ``get(dtype)`` converts (and keeps) the
    copy for ``dtype`` and drops any other; ``release()`` drops it. The copies' values are the float32 GEMM's
    (the float64 Gram matrix holds float32 values exactly, so its bfloat16 rounding is the float32 one's)."""

    def __init__(self, source: torch.Tensor, form: Literal["gram", "rows"]) -> None:
        self.source = source
        self.form: Literal["gram", "rows"] = form
        self.copy: torch.Tensor | None = None
        self.is_factor = False
        self.not_definite = False

    def get(self, dtype: torch.dtype) -> torch.Tensor:
        if self.copy is None or self.copy.dtype != dtype or self.is_factor:
            self.copy = None
            self.is_factor = False
            self.copy = self.source.to(dtype)
        return self.copy

    def factor(self) -> torch.Tensor | None:
        """The float32 lower Cholesky factor of the Gram matrix (form ``"gram"``), kept as the copy (any other
        dropped); None when the Gram matrix is not positive definite in float32 (remembered: not tried again)."""
        if self.form != "gram" or self.not_definite:
            return None
        if self.copy is None or not self.is_factor:
            self.copy = None  # dropped before the factor's copy is made
            lower = self.source.to(torch.float32)
            if not cholesky_in_place(lower):
                self.not_definite = True
                return None
            self.copy, self.is_factor = lower, True
        return self.copy

    def release(self) -> None:
        self.copy = None
        self.is_factor = False


def search_scales_gram(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
    rescore: bool = True,
    counts: list[RescoreCount] | None = None,
    bfloat16: bool | None = None,
    scratch: ScratchBuffers | None = None,
    factor: bool = True,
) -> ScaleSearchResult:
    """The AWQ grid search (:func:`qalgos.awq.best_on_grid`) for linears ``weights [out_j, in]`` that all read
    ``x [..., in]`` and are inspected on their own concatenated outputs (biases cancel in the difference);
    ``loss`` is that output MSE, computed in Gram form in float64. ``rescore``: score every ratio in float32
    and in float64 only those near the float32 best (see the module docstring; ``counts`` receives how many);
    ``False`` scores every ratio in float64. ``bfloat16``: with ``rescore``, score every ratio in bfloat16
    first and in float32 only those near the bfloat16 best; None (the default) when this CPU has native
    bfloat16 dot products (:func:`native_bfloat16`) and ``in`` is at least :data:`BFLOAT16_MIN_WIDTH`. The
    chosen ratio, scales and loss are the same either way wherever the tiers' error premises hold (checked on
    every ratio re-scored). ``scratch``: where the trials and the losses' products live (default: a new
    :class:`~qalgos.scratch_buffers.ScratchBuffers`, reused ratio after ratio and dropped at the end). ``factor``:
    with ``rescore`` and the Gram form, the float32 tier scores through the Gram matrix's Cholesky factor
    (:func:`factor_output_mse`) when it pays for the factorisation (:func:`factor_pays`) and the Gram matrix is
    positive definite in float32; ``False``: always through the Gram matrix."""
    x_mean, w_mean = search_statistics(x, weights, spec)
    gram = gram_matrix(x)
    in_ = x.shape[-1]
    tokens = max(1, x.numel() // in_)
    reference = [wj.detach() for wj in weights]
    # fewer rows than in: x Dᵀ is 2·tokens·in·out FLOPs against D G's 2·out·in²
    operands = ReducedOperands(float32_rows(x), "rows") if tokens < in_ else ReducedOperands(gram, "gram")

    scratch = scratch or ScratchBuffers()

    def loss_of(trial: list[torch.Tensor]) -> float:
        operands.release()  # the float64 product's temporaries take the reduced copy's place
        scratch.release("diff", "diff_low", "product", "product_low")
        return gram_output_mse(gram, tokens, reference, trial, scratch)

    if not rescore:
        return best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling, scratch)

    outputs = sum(int(wj.shape[0]) for wj in weights)
    through_factor: bool | None = None  # decided once, at the float32 tier's first call

    def before_float32(count: int) -> None:
        nonlocal through_factor
        if through_factor is None:
            through_factor = operands.form == "gram" and factor_pays(count, outputs, in_)

    def estimate_of(trial: list[torch.Tensor]) -> float:
        scratch.release("diff_low", "product_low", "diff64", "product64")  # the other tiers', if they ran
        factor = operands.factor() if through_factor else None
        if factor is not None:
            scratch.release("product")
            return factor_output_mse(factor, tokens, reference, trial, scratch)
        return reduced_output_mse(operands.get(torch.float32), operands.form, tokens, reference, trial, scratch)

    def coarse_of(trial: list[torch.Tensor]) -> float:
        scratch.release("diff64", "product64")
        return reduced_output_mse(operands.get(torch.bfloat16), operands.form, tokens, reference, trial, scratch)

    use_bfloat16 = (native_bfloat16() and in_ >= BFLOAT16_MIN_WIDTH) if bfloat16 is None else bfloat16
    try:
        return best_on_grid_rescored(
            x_mean,
            w_mean,
            weights,
            spec,
            estimate_of,
            loss_of,
            grid,
            duo_scaling,
            counts,
            coarse_of if use_bfloat16 else None,
            scratch,
            before_float32 if factor else None,
        )
    finally:
        operands.release()
        scratch.release()
