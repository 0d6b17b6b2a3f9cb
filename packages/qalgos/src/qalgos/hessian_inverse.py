"""The damped inverse Hessian GPTQ needs, with automatic damping increase when Cholesky fails.

Given a float32 Hessian ``H [in, in]`` (dead columns already set to 1 on the diagonal), GPTQ needs the
upper Cholesky factor ``U`` of ``(H + λI)⁻¹`` with ``λ = damp * mean(diag H)``. Damping candidates are
``damp_percent + k * damp_auto_increment`` (below 1); the first one for which every factorisation
succeeds is found by bisection over that grid (success is monotone in λ, so this equals a linear walk
at a logarithmic number of factorisations). If none succeeds, up to six diagonal floors
``1e-6 * max|diag| * 10**j`` are added on top of the largest candidate. If that fails too the result
carries no factor and the caller falls back to RTN.

The factorisation is a blocked float32 Cholesky that also yields the triangular inverse; its diagonal
blocks run single-threaded, so the factor is bit-identical for every torch thread count (LAPACK's
threaded factorisation is not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .finite_check import all_finite

FLOOR_ATTEMPTS = 6


@dataclass(frozen=True)
class DampedInverse:
    """``upper``: float32 ``[in, in]`` upper Cholesky factor of the damped inverse, or ``None``.

    ``damp`` is the damping fraction used, ``floor`` the absolute diagonal floor added on top (0.0 when
    none was needed), ``attempts`` the number of factorisations tried.
    """

    upper: torch.Tensor | None
    damp: float | None
    floor: float
    attempts: int


def damp_candidates(damp_percent: float, increment: float) -> list[float]:
    """``damp_percent + k * increment`` for k = 0, 1, ... while below 1 (only k = 0 if increment is 0)."""
    if increment <= 0:
        return [damp_percent]
    out: list[float] = []
    k = 0
    while True:
        value = round(damp_percent + k * increment, 12)
        if value >= 1.0:
            return out or [damp_percent]
        out.append(value)
        k += 1


LEAF = 1024


class _NotPositiveDefinite(Exception):
    """Internal signal: a leaf Cholesky failed."""


def _leaf(a: torch.Tensor, lower_out: torch.Tensor, inverse_out: torch.Tensor) -> None:
    """Single-threaded Cholesky of one diagonal block and its triangular inverse (``lower_out`` may be ``a``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lower, info = torch.linalg.cholesky_ex(a)
        if int(info) != 0:
            raise _NotPositiveDefinite
        eye = torch.eye(a.shape[0], dtype=a.dtype, device=a.device)
        lower_out.copy_(lower)
        inverse_out.copy_(torch.linalg.solve_triangular(lower, eye, upper=False))
    finally:
        torch.set_num_threads(threads)


def cholesky_with_inverse(
    a: torch.Tensor, *, overwrite: bool = False, lower: bool = True, keep_upper: bool = False
) -> tuple[torch.Tensor | None, torch.Tensor] | None:
    """``(L, L⁻¹)`` with ``a = L Lᵀ`` for a symmetric ``[n, n]`` matrix, or None if it is not positive definite.

    Blocked, left-looking, over blocks of :data:`LEAF` rows: for block column ``j``, ``A[j:, j] -=
    L[j:, :j] L[j, :j]ᵀ`` (one matmul), ``L_jj = chol(A_jj)`` and ``L_jj⁻¹`` on a single thread, ``L[j+1:, j] =
    A[j+1:, j] L_jj⁻ᵀ``; then the inverse block by block, ``(L⁻¹)_ij = -(L⁻¹)_ii Σ_k L_ik (L⁻¹)_kj``, over
    non-zero blocks only. About 2n³/3 multiply-adds in all (a recursive halving with dense products of the
    triangular halves needs twice that), nearly all in matmuls whose shapes do not depend on the thread
    count, and leaves run single-threaded, so the result is the same for every torch thread count
    (LAPACK's threaded factorisation is not). ``a`` is not modified unless ``overwrite`` (then it is the
    work space, saving one ``[n, n]`` copy); ``lower=False`` returns None for ``L`` (the work space holds
    it, so this saves the final copy). ``keep_upper`` (with ``overwrite``): the strict upper triangle of ``a``
    is left as it was (only the lower triangle is ever read, so no value changes), also when the
    factorisation fails, so a symmetric ``a`` can be rebuilt from it (:func:`restore_from_upper`).
    """
    n = a.shape[0]
    work = a if overwrite else a.clone()
    inverse = torch.zeros_like(a)
    edges = [*range(0, n, LEAF), n]
    if not _factor_columns(work, edges, lambda s, e: inverse[s:e, s:e], keep_upper):
        return None
    for j in range(len(edges) - 2):
        sj, ej = edges[j], edges[j + 1]
        for i in range(j + 1, len(edges) - 1):
            si, ei = edges[i], edges[i + 1]
            partial = work[si:ei, sj:si] @ inverse[sj:si, sj:ej]
            inverse[si:ei, sj:ej] = (inverse[si:ei, si:ei] @ partial).neg_()
    return (work.tril_() if lower else None), inverse


def _factor_columns(
    work: torch.Tensor, edges: list[int], leaf_inverse: Callable[[int, int], torch.Tensor], keep_upper: bool
) -> bool:
    """The left-looking blocked Cholesky of :func:`cholesky_with_inverse` over the block ``edges``, in place in
    the lower triangle of ``work [n, n]``; each diagonal block's triangular inverse is written into
    ``leaf_inverse(s, e)`` (a ``[e - s, e - s]`` tensor, read again for the blocks below it). False when a leaf is
    not positive definite (``work`` then holds partial values; with ``keep_upper`` its strict upper triangle is
    unchanged)."""
    n = work.shape[0]
    try:
        for j in range(len(edges) - 1):
            s, e = edges[j], edges[j + 1]
            top = work[s:e, s:e].clone() if keep_upper else None  # the update and the leaf overwrite its upper part
            if s:
                work[s:, s:e].addmm_(work[s:, :s], work[s:e, :s].T, alpha=-1)
            inverse = leaf_inverse(s, e)
            try:
                _leaf(work[s:e, s:e], work[s:e, s:e], inverse)
            finally:
                if top is not None:
                    block = work[s:e, s:e]
                    block.copy_(torch.where(_strict_upper(e - s, block.device), top, block))
            if e < n:
                work[e:, s:e] = work[e:, s:e] @ inverse.T
    except _NotPositiveDefinite:
        return False
    return True


def cholesky_in_place(a: torch.Tensor) -> bool:
    """Overwrite a symmetric ``[n, n]`` matrix with its lower Cholesky factor ``L`` (``a = L Lᵀ``; the strict upper
    triangle zeroed): the factorisation of :func:`cholesky_with_inverse` without the inverse, so one ``[LEAF,
    LEAF]`` matrix beside ``a`` instead of a second ``[n, n]`` one, and the same values for every torch thread
    count. False when ``a`` is not positive definite (``a`` then holds partial values)."""
    n = a.shape[0]
    scratch = torch.empty(min(LEAF, n), min(LEAF, n), dtype=a.dtype, device=a.device)
    if not _factor_columns(a, [*range(0, n, LEAF), n], lambda s, e: scratch[: e - s, : e - s], False):
        return False
    a.tril_()
    return True


REVERSE_CHUNK = 1 << 18


def reverse_in_place(matrix: torch.Tensor) -> None:
    """``matrix.copy_(matrix.flip(0, 1))`` for a contiguous ``[n, n]`` matrix, with a work space of
    :data:`REVERSE_CHUNK` elements instead of a second matrix: flipping both axes of a row-major matrix
    reverses its flat storage, done as swaps of mirrored chunks. On the CPU the chunks are copied through
    numpy's reversed views (``torch.flip`` of a 1-D chunk ran about 75x slower here: 7.6 against 0.1 CPU s for a
    14336 x 14336 float32 matrix); every value is a copy, so both give the same bits."""
    if matrix.device.type == "cpu" and matrix.dtype in _NUMPY_DTYPES:
        _reverse_numpy(matrix.view(-1).numpy())
        return
    flat = matrix.view(-1)
    total = flat.numel()
    half = total // 2
    for start in range(0, half, REVERSE_CHUNK):
        count = min(REVERSE_CHUNK, half - start)
        head = flat[start : start + count].clone()
        flat[start : start + count] = flat[total - start - count : total - start].flip(0)
        flat[total - start - count : total - start] = head.flip(0)


_NUMPY_DTYPES = (torch.float32, torch.float64)


def _reverse_numpy(flat: np.ndarray) -> None:
    """Reverse the 1-D array ``flat`` in place by swapping mirrored chunks of :data:`REVERSE_CHUNK` elements."""
    total = flat.size
    half = total // 2
    head = np.empty(min(REVERSE_CHUNK, half), dtype=flat.dtype)
    for start in range(0, half, REVERSE_CHUNK):
        count = min(REVERSE_CHUNK, half - start)
        saved = head[:count]
        np.copyto(saved, flat[start : start + count])
        np.copyto(flat[start : start + count], flat[total - start - count : total - start][::-1])
        np.copyto(flat[total - start - count : total - start], saved[::-1])


def _factor(hessian: torch.Tensor, add: float) -> torch.Tensor | None:
    """Upper Cholesky factor of ``(H + add·I)⁻¹`` (float32), or None when ``H + add·I`` is not positive definite.

    With ``J`` the reversal permutation and ``J (H + add·I) J = L Lᵀ``, the wanted factor is ``J L⁻¹ J``: one
    Cholesky and one triangular inverse instead of Cholesky, inverse and a second Cholesky.
    """
    damped = hessian.to(torch.float32).flip(0, 1).contiguous()
    damped.diagonal().add_(add)
    factors = cholesky_with_inverse(damped, overwrite=True, lower=False)
    del damped  # the work space: three [in, in] float32 matrices live at most (H, work, L⁻¹)
    if factors is None:
        return None
    upper = factors[1]
    del factors
    reverse_in_place(upper)  # flip(0, 1) without a second [in, in] matrix
    if not all_finite(upper):
        return None
    return upper


def _strict_upper(size: int, device: torch.device) -> torch.Tensor:
    """bool ``[size, size]``, True above the diagonal (copies through ``torch.where`` keep every bit, -0.0 included)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).triu_(1)


def restore_from_upper(work: torch.Tensor, diagonal: torch.Tensor) -> None:
    """Rebuild a symmetric ``[n, n]`` matrix in place from its strict upper triangle and ``diagonal`` ``[n]``
    (the lower triangle and diagonal are overwritten; every value is a copy, so the rebuilt matrix equals the
    original bit for bit). Works block by block over :data:`LEAF`, with no second ``[n, n]`` matrix."""
    n = work.shape[0]
    edges = [*range(0, n, LEAF), n]
    for i in range(len(edges) - 1):
        si, ei = edges[i], edges[i + 1]
        for j in range(i):
            sj, ej = edges[j], edges[j + 1]
            work[si:ei, sj:ej] = work[sj:ej, si:ei].T
        block = work[si:ei, si:ei]
        block.copy_(torch.where(_strict_upper(ei - si, block.device), block, block.T))
        block.diagonal().copy_(diagonal[si:ei])


def _factor_in_place(hessian: torch.Tensor, add: float) -> torch.Tensor | None:
    """:func:`_factor` with ``hessian`` (a contiguous, exactly symmetric float32 ``[n, n]``) as its own work
    space: the same values, one ``[n, n]`` matrix fewer. On success ``hessian`` is consumed (it then holds
    work values); when ``H + add·I`` is not positive definite it is restored bit for bit and None returned."""
    diagonal = hessian.diagonal().clone()
    reverse_in_place(hessian)  # the same values as flip(0, 1)
    hessian.diagonal().add_(add)
    factors = cholesky_with_inverse(hessian, overwrite=True, lower=False, keep_upper=True)
    upper = factors[1] if factors is not None else None
    del factors
    if upper is not None:
        reverse_in_place(upper)
        if all_finite(upper):
            return upper
    restore_from_upper(hessian, diagonal.flip(0))
    reverse_in_place(hessian)
    return None


def damped_inverse(
    hessian: torch.Tensor, damp_percent: float, increment: float, *, consume: bool = False
) -> DampedInverse:
    """Upper Cholesky factor of ``(H + damp * mean(diag H) I)⁻¹`` with the smallest working damp.

    ``consume``: the caller gives ``hessian`` up (a contiguous, exactly symmetric float32 matrix it will not
    read again): the first damping tried factors it in place (:func:`_factor_in_place`, the same values with one
    ``[n, n]`` float32 matrix less: 0.82 GB at ``in`` = 14336); if that one fails, ``hessian`` is restored and
    the search continues on copies. Without ``consume`` it is never modified."""
    if not all_finite(hessian):
        return DampedInverse(None, None, 0.0, 0)
    mean_diag = float(torch.mean(torch.diagonal(hessian)))
    candidates = damp_candidates(damp_percent, increment)
    attempts = 0
    cache: dict[int, torch.Tensor | None] = {}
    if consume and hessian.dtype == torch.float32 and hessian.is_contiguous():
        attempts += 1
        first = _factor_in_place(hessian, candidates[0] * mean_diag)
        if first is not None:
            return DampedInverse(first, candidates[0], 0.0, attempts)
        cache[0] = None

    def trial(k: int) -> torch.Tensor | None:
        nonlocal attempts
        if k not in cache:
            attempts += 1
            cache[k] = _factor(hessian, candidates[k] * mean_diag)
        return cache[k]

    if trial(0) is not None:
        return DampedInverse(cache[0], candidates[0], 0.0, attempts)
    last = len(candidates) - 1
    if last > 0 and trial(last) is not None:
        lo, hi = 0, last  # lo fails, hi succeeds
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if trial(mid) is not None:
                hi = mid
            else:
                lo = mid
        return DampedInverse(cache[hi], candidates[hi], 0.0, attempts)
    max_diag = float(torch.diagonal(hessian).abs().max())
    base = candidates[last] * mean_diag
    for j in range(FLOOR_ATTEMPTS):
        floor = 1e-6 * max_diag * 10.0**j
        attempts += 1
        upper = _factor(hessian, base + floor)
        if upper is not None:
            return DampedInverse(upper, candidates[last], floor, attempts)
    return DampedInverse(None, None, 0.0, attempts)
