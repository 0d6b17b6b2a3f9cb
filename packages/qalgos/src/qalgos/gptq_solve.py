"""The GPTQ column solve: quantize columns in order and push each column's error onto the rest.

Works on the transposed weight ``Wt [in, out]`` (a column of ``W`` is a contiguous row of ``Wt``), already
permuted into the visiting order, with ``U [in, in]`` the upper Cholesky factor of the damped inverse
Hessian in the same order. Column ``j``'s error ``e_j = (w_j - q_j) / U[j, j]`` updates every later column
``k`` by ``w_k -= U[j, k] * e_j``. Updates are applied at three levels so that most flops are matmuls:
rank-1 inside a sub-block, one matmul from a finished sub-block to the rest of its block, one matmul from
a finished block to all later columns (the lazy update). Group parameters are computed when a dynamic
group's segment starts, at which point all of its columns are fully updated.

GPTAQ and FOEM (:mod:`qalgos.gptaq`) run the same solve with two optional terms, following GPT-QModel
7.7.0's ``GPTAQ`` / ``FOEM`` (``gptaq.py``, ``foem.py``):

* ``P [in, in]`` (strictly upper triangular, ``alpha * triu(dXXT Uᵀ, 1) U``): column ``j``, holding
  ``w_j`` just before it is quantized, adds ``P[j, k] * w_j`` to every later column ``k`` of its block;
  a finished block adds ``P[b, k] * f_b`` to the later columns, where ``f_b = w_b - U[b, b] e_b`` is the
  column's final in-block value (``q_b`` for GPTAQ).
* ``beta`` (FOEM): the column error is ``e_j = ((w_j - q_j) - beta (w_j - r_j)) / U[j, j]`` with ``r_j``
  the column's original value, and every column except the first of a lazy-update block is first
  pulled toward its original value, ``w_j -= beta (w_j - r_j)`` (the reference applies the pull only to
  the next column inside its 128-column block).

Without them (``p=None``, ``beta=0``) the solve allocates nothing for them and runs GPTQ's operations
alone, in the same order, so ``alpha = beta = 0`` is GPTQ bit for bit (tested). The loss is
``sum((w - q)**2 / d**2) / 2`` in every case (FOEM's pull is not part of it).

The per-column vector operations and the small in-block matmuls run with one torch thread (restored
afterwards): they are far below the size where threading pays, and waking threads for each of them
costs more than the work, badly so on a shared machine. The lazy block updates use the caller's thread
count. Results do not depend on the thread count (tested), so this changes speed only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .column_order import ColumnPlan, inner_blocks, outer_blocks
from .group_params import gptq_params
from .spec import QuantSpec

INNER_WIDTH = 16


@dataclass(frozen=True)
class SolveOutput:
    """Solve results in visiting order: ``codes_t`` ``[in, out]`` uint8, per-group
    ``scales``/``zeros`` ``[G, out]`` float32, and ``loss_sum`` = ``sum((w - q)**2 / d**2) / 2``."""

    codes_t: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    loss_sum: float


def static_params(weight: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Parameters of every natural group of ``weight [out, in]`` before any update: ``[G, out]`` each."""
    out, in_ = weight.shape
    width = spec.group_width(in_)
    groups = spec.groups(in_)
    scales = torch.empty(groups, out, dtype=torch.float32)
    zeros = torch.empty(groups, out, dtype=torch.float32)
    for g in range(groups):
        scales[g], zeros[g] = gptq_params(weight[:, g * width : (g + 1) * width], spec)
    return scales, zeros


def solve(
    wt: torch.Tensor,
    upper: torch.Tensor,
    plan: ColumnPlan,
    spec: QuantSpec,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    min_code: int = 0,
    *,
    p: torch.Tensor | None = None,
    beta: float = 0.0,
) -> SolveOutput:
    """Run the column solve in place on ``wt [in, out]`` (float32, visiting order).

    ``scales``/``zeros`` ``[G, out]`` hold precomputed parameters when ``plan.dynamic`` is False and are
    filled in as segments start otherwise. ``min_code``: the lowest code a column may take (codes are
    clamped to ``[min_code, maxq]``; QQQ's per-channel grid uses 1, a symmetric ``±7`` around zero 8).
    ``p``: GPTAQ's asymmetric term, float32 ``[in, in]`` in visiting order, or ``None``; ``beta``: FOEM's
    pull toward the original weights (0 disables it). See the module docstring.
    """
    threads = torch.get_num_threads()
    try:
        return _solve(wt, upper, plan, spec, scales, zeros, threads, min_code, p, beta)
    finally:
        torch.set_num_threads(threads)


def _solve(
    wt: torch.Tensor,
    upper: torch.Tensor,
    plan: ColumnPlan,
    spec: QuantSpec,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    threads: int,
    min_code: int,
    p: torch.Tensor | None,
    beta: float,
) -> SolveOutput:
    in_, out = wt.shape
    maxq = spec.maxq
    codes_t = torch.empty(in_, out, dtype=torch.uint8)  # a quarter of float32 codes' memory
    q = torch.empty(out, dtype=torch.float32)
    diag_t = torch.diagonal(upper)
    diag = diag_t.tolist()
    group_of = plan.group_of.tolist()
    seg_end = {s: e for s, e, _ in plan.segments} if plan.dynamic else {}
    raw = wt.clone() if beta else None  # FOEM: the original columns r_j
    loss_sum = 0.0
    deq = torch.empty(out, dtype=torch.float32)
    blocks = outer_blocks(plan, spec.block_size)
    loss_rows = torch.empty(max(b1 - b0 for b0, b1 in blocks), out, dtype=torch.float64)
    for b0, b1 in blocks:
        block_err = torch.empty(b1 - b0, out, dtype=torch.float32)
        block_w = torch.empty(b1 - b0, out, dtype=torch.float32) if p is not None else None
        block_res = torch.empty(b1 - b0, out, dtype=torch.float32) if raw is not None else None
        for c0, c1 in inner_blocks(plan, b0, b1, INNER_WIDTH):
            if c0 in seg_end:  # segment starts are always sub-block starts (see inner_blocks)
                scales[group_of[c0]], zeros[group_of[c0]] = gptq_params(wt[c0 : seg_end[c0]].T, spec)
            torch.set_num_threads(1)
            for j in range(c0, c1):
                g = group_of[j]
                scale, zero = scales[g], zeros[g]
                w = wt[j]
                if raw is not None and j > b0:  # FOEM: pull toward the original column
                    w.sub_((w - raw[j]).mul_(beta))
                torch.div(w, scale, out=q)
                q.round_().add_(zero).clamp_(min_code, maxq)
                codes_t[j].copy_(q)
                torch.sub(q, zero, out=deq).mul_(scale)
                err = block_err[j - b0]
                if raw is not None and block_res is not None:  # FOEM: the residual, and the error less the pull
                    torch.sub(w, deq, out=block_res[j - b0]).div_(diag[j])
                    torch.sub(w, deq, out=err).sub_((w - raw[j]).mul_(beta)).div_(diag[j])
                else:
                    torch.sub(w, deq, out=err).div_(diag[j])
                if block_w is not None:  # GPTAQ: w_j as quantized, for the block's P updates
                    block_w[j - b0].copy_(w)
                if j + 1 < c1:
                    wt[j + 1 : c1].addr_(upper[j, j + 1 : c1], err, alpha=-1)
                    if p is not None:
                        wt[j + 1 : c1].addr_(p[j, j + 1 : c1], w)
            if c1 < b1:
                wt[c1:b1].addmm_(upper[c0:c1, c1:b1].T, block_err[c0 - b0 : c1 - b0], alpha=-1)
                if p is not None and block_w is not None:
                    wt[c1:b1].addmm_(p[c0:c1, c1:b1].T, block_w[c0 - b0 : c1 - b0])
            torch.set_num_threads(threads)
        residual = block_res if block_res is not None else block_err
        squared = loss_rows[: b1 - b0]  # the float64 squares of the block's residuals, in a reused matrix
        squared.copy_(residual)
        loss_sum += float(squared.square_().sum()) / 2
        if b1 < in_:
            wt[b1:].addmm_(upper[b0:b1, b1:].T, block_err, alpha=-1)
            if p is not None and block_w is not None:
                final = block_w - diag_t[b0:b1, None] * block_err
                wt[b1:].addmm_(p[b0:b1, b1:].T, final)
    return SolveOutput(codes_t, scales, zeros, loss_sum)
