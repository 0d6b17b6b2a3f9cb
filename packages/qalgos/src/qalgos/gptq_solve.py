"""The GPTQ column solve: quantize columns in order and push each column's error onto the rest.

Works on the transposed weight ``Wt [in, out]`` (a column of ``W`` is a contiguous row of ``Wt``), already
permuted into the visiting order, with ``U [in, in]`` the upper Cholesky factor of the damped inverse
Hessian in the same order. Column ``j``'s error ``e_j = (w_j - q_j) / U[j, j]`` updates every later column
``k`` by ``w_k -= U[j, k] * e_j``. Updates are applied at three levels so that most flops are matmuls:
rank-1 inside a sub-block, one matmul from a finished sub-block to the rest of its block, one matmul from
a finished block to all later columns (the lazy update). Group parameters are computed when a dynamic
group's segment starts, at which point all of its columns are fully updated.

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
) -> SolveOutput:
    """Run the column solve in place on ``wt [in, out]`` (float32, visiting order).

    ``scales``/``zeros`` ``[G, out]`` hold precomputed parameters when ``plan.dynamic`` is False and are
    filled in as segments start otherwise. ``min_code``: the lowest code a column may take (codes are
    clamped to ``[min_code, maxq]``; QQQ's per-channel grid uses 1, a symmetric ``±7`` around zero 8).
    """
    threads = torch.get_num_threads()
    try:
        return _solve(wt, upper, plan, spec, scales, zeros, threads, min_code)
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
    min_code: int = 0,
) -> SolveOutput:
    in_, out = wt.shape
    maxq = spec.maxq
    codes_t = torch.empty(in_, out, dtype=torch.uint8)  # a quarter of float32 codes' memory
    q = torch.empty(out, dtype=torch.float32)
    diag = torch.diagonal(upper).tolist()
    group_of = plan.group_of.tolist()
    seg_end = {s: e for s, e, _ in plan.segments} if plan.dynamic else {}
    loss_sum = 0.0
    deq = torch.empty(out, dtype=torch.float32)
    for b0, b1 in outer_blocks(plan, spec.block_size):
        block_err = torch.empty(b1 - b0, out, dtype=torch.float32)
        for c0, c1 in inner_blocks(plan, b0, b1, INNER_WIDTH):
            if c0 in seg_end:  # segment starts are always sub-block starts (see inner_blocks)
                scales[group_of[c0]], zeros[group_of[c0]] = gptq_params(wt[c0 : seg_end[c0]].T, spec)
            torch.set_num_threads(1)
            for j in range(c0, c1):
                g = group_of[j]
                scale, zero = scales[g], zeros[g]
                w = wt[j]
                torch.div(w, scale, out=q)
                q.round_().add_(zero).clamp_(min_code, maxq)
                codes_t[j].copy_(q)
                torch.sub(q, zero, out=deq).mul_(scale)
                err = block_err[j - b0]
                torch.sub(w, deq, out=err).div_(diag[j])
                if j + 1 < c1:
                    wt[j + 1 : c1].addr_(upper[j, j + 1 : c1], err, alpha=-1)
            if c1 < b1:
                wt[c1:b1].addmm_(upper[c0:c1, c1:b1].T, block_err[c0 - b0 : c1 - b0], alpha=-1)
            torch.set_num_threads(threads)
        loss_sum += float(block_err.to(torch.float64).square().sum()) / 2
        if b1 < in_:
            wt[b1:].addmm_(upper[b0:b1, b1:].T, block_err, alpha=-1)
    return SolveOutput(codes_t, scales, zeros, loss_sum)
