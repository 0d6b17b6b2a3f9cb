"""Seeded orthogonal matrices for incoherence processing (rotations folded into weights), in float64.

* a randomized Hadamard matrix ``H · diag(±1) / sqrt(n)`` (:mod:`qalgos.hadamard` builds ``H``; the signs are
  drawn from the seed) for orders a construction reaches;
* a random orthogonal matrix otherwise, or when asked: the ``Q`` of the QR factorization of a standard Gaussian
  ``[n, n]`` matrix, its columns' signs fixed so that ``R``'s diagonal is positive (Haar-distributed, and
  independent of the LAPACK's sign convention).

Every draw comes from a CPU ``torch.Generator`` seeded with :func:`stream_seed` ``(seed, purpose, n)``, so the
matrix of one purpose (``"residual"``, ``"head"``) does not depend on which other matrices a run draws.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from .hadamard import describe_factors, hadamard_factors, hadamard_matrix

ROTATION_KINDS = ("hadamard", "random")


@dataclass(frozen=True)
class Rotation:
    """``matrix`` ``[n, n]`` float64 with ``matrix @ matrix.T == I`` (to rounding); ``kind`` the construction
    used (``"hadamard"`` or ``"random"``) and ``construction`` how (the Hadamard factors, or ``"gaussian qr"``)."""

    matrix: torch.Tensor
    kind: str
    construction: str

    @property
    def size(self) -> int:
        return int(self.matrix.shape[0])

    def describe(self) -> dict[str, object]:
        """``{"size", "kind", "construction"}``: what a run records of this matrix."""
        return {"size": self.size, "kind": self.kind, "construction": self.construction}


def stream_seed(seed: int, purpose: str, n: int) -> int:
    """A 63-bit generator seed for the matrix of ``purpose`` and order ``n`` under the run's ``seed``."""
    digest = hashlib.sha256(f"lowbit-rotation|{seed}|{purpose}|{n}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _generator(seed: int, purpose: str, n: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(stream_seed(seed, purpose, n))


def randomized_hadamard(n: int, seed: int, purpose: str = "residual") -> Rotation | None:
    """``H · diag(s) / sqrt(n)`` with signs ``s`` drawn from the seed; None when no Hadamard order-``n`` construction
    is known (:func:`qalgos.hadamard.hadamard_factors`)."""
    factors = hadamard_factors(n)
    if factors is None:
        return None
    signs = torch.randint(0, 2, (n,), generator=_generator(seed, purpose, n), dtype=torch.int64) * 2 - 1
    matrix = hadamard_matrix(n) * signs.to(torch.float64) / math.sqrt(n)
    return Rotation(matrix, "hadamard", describe_factors(factors))


def random_orthogonal(n: int, seed: int, purpose: str = "residual") -> Rotation:
    """The sign-fixed ``Q`` of a seeded Gaussian matrix's QR factorization (module docstring)."""
    gaussian = torch.randn(n, n, generator=_generator(seed, purpose, n), dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1.0
    return Rotation(q * signs, "random", "gaussian qr")


def orthogonal_rotation(n: int, kind: str, seed: int, purpose: str) -> Rotation:
    """The rotation of order ``n`` a run of ``kind`` uses for ``purpose``: ``"hadamard"`` is the randomized
    Hadamard matrix where a construction exists, else the random orthogonal one (the returned ``kind`` says
    which); ``"random"`` is always the random orthogonal one. Raises ``ValueError`` for another kind."""
    if kind not in ROTATION_KINDS:
        raise ValueError(f"rotation kind: expected one of {', '.join(ROTATION_KINDS)}, found {kind!r}")
    if n < 1:
        raise ValueError(f"rotation order: expected a positive size, found {n}")
    if kind == "hadamard":
        found = randomized_hadamard(n, seed, purpose)
        if found is not None:
            return found
    return random_orthogonal(n, seed, purpose)
