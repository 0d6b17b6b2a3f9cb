"""Hadamard matrices (``H`` of ±1 with ``H Hᵀ = n I``) of the orders a known construction reaches.

Orders are built as Kronecker products of:

* Sylvester's ``[[1, 1], [1, -1]]`` powers (any power of two);
* Paley I: order ``q + 1`` for a prime power ``q ≡ 3 (mod 4)`` (12 from q = 11, 20 from 19, 28 from 27, 48 from
  47 ...);
* Paley II: order ``2 (q + 1)`` for a prime power ``q ≡ 1 (mod 4)`` (36 from 17, 52 from 25 ...).

So SmolLM2's hidden 576 is ``12 ⊗ 48``, Gemma 3 270M's 640 ``20 ⊗ 32``, Qwen2's 896 ``28 ⊗ 32``; head dims
64 / 128 / 256 are Sylvester's. :func:`hadamard_factors` finds a factorization (None when none is known within
:data:`MAX_PALEY_Q`); :func:`hadamard_matrix` builds it in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from .finite_field import jacobsthal, prime_power

#: The largest field order a Paley factor is built from (its Jacobsthal matrix is ``q x q``).
MAX_PALEY_Q = 8191


@dataclass(frozen=True)
class HadamardFactor:
    """One Kronecker factor: ``kind`` ``"sylvester"`` / ``"paley1"`` / ``"paley2"``, its ``order``, and the
    field order ``q`` of a Paley factor (0 for Sylvester)."""

    kind: str
    order: int
    q: int = 0

    def describe(self) -> str:
        return f"{self.kind} {self.order}" + (f" (q={self.q})" if self.q else "")


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def paley_factor(order: int) -> HadamardFactor | None:
    """The Paley construction of ``order`` (I preferred), or None."""
    q = order - 1
    if q % 4 == 3 and q <= MAX_PALEY_Q and prime_power(q) is not None:
        return HadamardFactor("paley1", order, q)
    if order % 2 == 0:
        q = order // 2 - 1
        if q % 4 == 1 and q <= MAX_PALEY_Q and prime_power(q) is not None:
            return HadamardFactor("paley2", order, q)
    return None


@lru_cache(maxsize=256)
def hadamard_factors(n: int) -> tuple[HadamardFactor, ...] | None:
    """Kronecker factors of a Hadamard matrix of order ``n`` (Paley factors first, smallest first, then one
    Sylvester factor; none for order 1), or None when no construction here reaches ``n``."""
    if n < 1:
        return None
    if n == 1:
        return ()
    if _is_power_of_two(n):
        return (HadamardFactor("sylvester", n),)
    for order in range(4, n + 1, 4):  # every Hadamard order above 2 is a multiple of 4
        if n % order or _is_power_of_two(order):
            continue
        factor = paley_factor(order)
        if factor is None:
            continue
        rest = hadamard_factors(n // order)
        if rest is not None:
            return (factor, *rest)
    return None


def _sylvester(order: int) -> np.ndarray:
    h = np.ones((1, 1), dtype=np.int8)
    while h.shape[0] < order:
        h = np.block([[h, h], [h, -h]])
    return h


def _paley(factor: HadamardFactor) -> np.ndarray:
    jac = jacobsthal(factor.q).astype(np.int64)
    ones = np.ones((factor.q, 1), dtype=np.int64)
    if factor.kind == "paley1":  # I + [[0, 1ᵀ], [-1, J]]
        skew = np.block([[np.zeros((1, 1), dtype=np.int64), ones.T], [-ones, jac]])
        paley1: np.ndarray = (np.eye(factor.order, dtype=np.int64) + skew).astype(np.int8)
        return paley1
    core = np.block([[np.zeros((1, 1), dtype=np.int64), ones.T], [ones, jac]])  # symmetric, q ≡ 1 (mod 4)
    on_zero = np.array([[1, -1], [-1, -1]], dtype=np.int64)
    on_sign = np.array([[1, 1], [1, -1]], dtype=np.int64)
    paley2: np.ndarray = np.kron(core, on_sign) + np.kron(np.eye(factor.q + 1, dtype=np.int64), on_zero)
    return paley2.astype(np.int8)


def hadamard_matrix(n: int) -> torch.Tensor:
    """The ``[n, n]`` float64 Hadamard matrix of :func:`hadamard_factors` (entries ±1, ``H Hᵀ = n I``); raises
    ``ValueError`` naming ``n`` when no construction here reaches it."""
    factors = hadamard_factors(n)
    if factors is None:
        raise ValueError(f"Hadamard order {n}: no Sylvester/Paley construction reaches it")
    h: np.ndarray = np.ones((1, 1), dtype=np.float64)
    for factor in factors:
        block = _sylvester(factor.order) if factor.kind == "sylvester" else _paley(factor)
        h = np.kron(h, block.astype(np.float64))
    return torch.from_numpy(h)


def describe_factors(factors: tuple[HadamardFactor, ...]) -> str:
    """``"paley1 12 (q=11) x paley1 48 (q=47)"``: how a matrix was built (recorded by a run)."""
    return " x ".join(f.describe() for f in factors) or "order 1"
