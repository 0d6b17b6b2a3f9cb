"""The GPTAQ / FOEM column solve: GPTQ's solve plus the asymmetric term ``P`` and FOEM's ``beta`` pull.

Same conventions as :mod:`qalgos.gptq_solve`: the transposed weight ``Wt [in, out]`` in visiting order,
``U [in, in]`` the upper Cholesky factor of the damped inverse Hessian in that order, three update levels
(rank-1 inside a sub-block, a matmul to the rest of the block, the lazy matmul to all later columns).

Extra terms, following GPT-QModel 7.7.0's ``GPTAQ`` / ``FOEM`` (``gptaq.py``, ``foem.py``):

* ``P [in, in]`` (strictly upper triangular, ``alpha * triu(dXXT Uᵀ, 1) U``): column ``j``, holding
  ``w_j`` just before it is quantized, adds ``P[j, k] * w_j`` to every later column ``k`` of its block;
  a finished block adds ``P[b, k] * f_b`` to the later columns, where ``f_b = w_b - U[b, b] e_b`` is the
  column's final in-block value (``q_b`` for GPTAQ).
* ``beta`` (FOEM): the column error is ``e_j = ((w_j - q_j) - beta (w_j - r_j)) / U[j, j]`` with ``r_j``
  the column's original value, and every column except the first of a lazy-update block is first
  pulled toward its original value, ``w_j -= beta (w_j - r_j)`` (the reference applies the pull only to
  the next column inside its 128-column block).

The loss is ``sum((w - q)**2 / d**2) / 2`` as for GPTQ. With ``P = None`` and ``beta = 0`` every
operation is the one :func:`qalgos.gptq_solve.solve` performs, in the same order, so the codes are
bit-identical to GPTQ's (tested).
"""

from __future__ import annotations

import torch

from .column_order import ColumnPlan, inner_blocks, outer_blocks
from .gptq_solve import INNER_WIDTH, SolveOutput
from .group_params import gptq_params
from .spec import QuantSpec


def solve_asymmetric(
    wt: torch.Tensor,
    upper: torch.Tensor,
    plan: ColumnPlan,
    spec: QuantSpec,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    p: torch.Tensor | None,
    beta: float,
) -> SolveOutput:
    """Run the GPTAQ/FOEM column solve in place on ``wt [in, out]`` (float32, visiting order).

    ``p``: float32 ``[in, in]`` in visiting order or ``None``; ``beta``: FOEM's pull (0 disables it).
    ``scales``/``zeros`` ``[G, out]`` as for :func:`qalgos.gptq_solve.solve`.
    """
    threads = torch.get_num_threads()
    try:
        return _solve(wt, upper, plan, spec, scales, zeros, p, beta, threads)
    finally:
        torch.set_num_threads(threads)


def _solve(
    wt: torch.Tensor,
    upper: torch.Tensor,
    plan: ColumnPlan,
    spec: QuantSpec,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    p: torch.Tensor | None,
    beta: float,
    threads: int,
) -> SolveOutput:
    in_, out = wt.shape
    maxq = spec.maxq
    codes_t = torch.empty(in_, out, dtype=torch.float32)
    diag_t = torch.diagonal(upper)
    diag = diag_t.tolist()
    group_of = plan.group_of.tolist()
    seg_end = {s: e for s, e, _ in plan.segments} if plan.dynamic else {}
    raw = wt.clone() if beta else None
    loss_sum = 0.0
    deq = torch.empty(out, dtype=torch.float32)
    for b0, b1 in outer_blocks(plan, spec.block_size):
        block_err = torch.empty(b1 - b0, out, dtype=torch.float32)
        block_w = torch.empty(b1 - b0, out, dtype=torch.float32) if p is not None else None
        block_res = torch.empty(b1 - b0, out, dtype=torch.float32) if raw is not None else None
        for c0, c1 in inner_blocks(plan, b0, b1, INNER_WIDTH):
            if c0 in seg_end:
                scales[group_of[c0]], zeros[group_of[c0]] = gptq_params(wt[c0 : seg_end[c0]].T, spec)
            torch.set_num_threads(1)
            for j in range(c0, c1):
                g = group_of[j]
                scale, zero = scales[g], zeros[g]
                w = wt[j]
                if raw is not None and j > b0:
                    w.sub_((w - raw[j]).mul_(beta))
                q = codes_t[j]
                torch.div(w, scale, out=q)
                q.round_().add_(zero).clamp_(0, maxq)
                torch.sub(q, zero, out=deq).mul_(scale)
                err = block_err[j - b0]
                if raw is not None and block_res is not None:
                    torch.sub(w, deq, out=block_res[j - b0]).div_(diag[j])
                    torch.sub(w, deq, out=err).sub_((w - raw[j]).mul_(beta)).div_(diag[j])
                else:
                    torch.sub(w, deq, out=err).div_(diag[j])
                if block_w is not None:
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
        loss_sum += float(residual.to(torch.float64).square().sum()) / 2
        if b1 < in_:
            wt[b1:].addmm_(upper[b0:b1, b1:].T, block_err, alpha=-1)
            if p is not None and block_w is not None:
                final = block_w - diag_t[b0:b1, None] * block_err
                wt[b1:].addmm_(p[b0:b1, b1:].T, final)
    return SolveOutput(codes_t, scales, zeros, loss_sum)
