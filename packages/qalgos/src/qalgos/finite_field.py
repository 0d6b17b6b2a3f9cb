"""The quadratic character of a finite field GF(q), q a prime power, for Paley's Hadamard constructions.

Elements of GF(p^k) are numbered ``0 .. q-1`` by their coefficient vectors over GF(p) in base ``p``
(``sum(c_i * p**i)``; element 0 is zero); the field is GF(p)[x] modulo the first monic irreducible polynomial of
degree ``k`` in that numbering. Only addition, subtraction and squaring are needed, all on small ``q`` (a
Paley factor of a hidden size: a few hundred), with numpy integer arrays.
"""

from __future__ import annotations

import numpy as np


def prime_power(q: int) -> tuple[int, int] | None:
    """``(p, k)`` with ``q == p**k`` and ``p`` prime, else None."""
    if q < 2:
        return None
    p = next((d for d in range(2, int(q**0.5) + 1) if q % d == 0), q)
    k, rest = 0, q
    while rest % p == 0:
        rest //= p
        k += 1
    return (p, k) if rest == 1 else None


def _digits(q: int, p: int, k: int) -> np.ndarray:
    """``[q, k]`` base-``p`` digits of every element number (lowest power first)."""
    numbers = np.arange(q)
    return np.stack([(numbers // p**i) % p for i in range(k)], axis=1)


def _poly_mod(a: list[int], m: list[int], p: int) -> list[int]:
    """``a mod m`` over GF(p); coefficient lists lowest power first, ``m`` monic."""
    a = list(a)
    while len(a) >= len(m):
        lead = a[-1]
        if lead:
            shift = len(a) - len(m)
            for i, c in enumerate(m):
                a[shift + i] = (a[shift + i] - lead * c) % p
        a.pop()
    return a


def _irreducible(p: int, k: int) -> list[int]:
    """The first monic irreducible polynomial of degree ``k`` over GF(p) (no monic factor of degree 1..k/2)."""
    for tail in range(p**k):
        candidate = [(tail // p**i) % p for i in range(k)] + [1]
        if not any(
            not any(_poly_mod(candidate, [(low // p**i) % p for i in range(d)] + [1], p))
            for d in range(1, k // 2 + 1)
            for low in range(p**d)
        ):
            return candidate
    raise ArithmeticError(f"no irreducible polynomial of degree {k} over GF({p})")  # pragma: no cover (one exists)


def _square_numbers(digits: np.ndarray, modulus: list[int], p: int) -> set[int]:
    """The element numbers of every square ``x*x`` of GF(p^k) (0 included)."""
    k = digits.shape[1]
    squares = set()
    for row in digits:
        product = [0] * (2 * k - 1)
        for i, a in enumerate(row):
            for j, b in enumerate(row):
                product[i + j] = (product[i + j] + int(a) * int(b)) % p
        reduced = _poly_mod(product, modulus, p) if k > 1 else product[:1]
        reduced += [0] * (k - len(reduced))
        squares.add(sum(int(c) * p**i for i, c in enumerate(reduced)))
    return squares


def jacobsthal(q: int) -> np.ndarray:
    """The ``[q, q]`` int8 matrix ``J[a, b] = chi(a - b)`` of GF(q) (``chi``: 0 at zero, 1 on nonzero squares,
    -1 elsewhere); raises ``ValueError`` when ``q`` is not a prime power."""
    found = prime_power(q)
    if found is None:
        raise ValueError(f"GF({q}): expected a prime power order, found {q}")
    p, k = found
    digits = _digits(q, p, k)
    squares = _square_numbers(digits, _irreducible(p, k) if k > 1 else [0, 1], p)
    chi = np.full(q, -1, dtype=np.int8)
    chi[sorted(squares)] = 1
    chi[0] = 0
    difference = (digits[:, None, :] - digits[None, :, :]) % p  # [q, q, k]
    numbers = (difference * (p ** np.arange(k))).sum(axis=2)
    table: np.ndarray = chi[numbers]
    return table
