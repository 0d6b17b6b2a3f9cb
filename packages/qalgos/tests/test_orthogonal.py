"""Hadamard constructions (Sylvester, Paley I/II over prime-power fields) and the seeded rotations built on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.finite_field import jacobsthal, prime_power
from qalgos.hadamard import describe_factors, hadamard_factors, hadamard_matrix
from qalgos.orthogonal import orthogonal_rotation, random_orthogonal, randomized_hadamard


@pytest.mark.parametrize("q", [3, 5, 7, 9, 11, 25, 27, 49])
def test_jacobsthal_matrix_of_a_prime_power_field(q: int) -> None:
    jac = jacobsthal(q).astype(np.int64)
    assert (np.diag(jac) == 0).all() and (jac.sum(axis=1) == 0).all()  # as many squares as non-squares
    expected = q * np.eye(q, dtype=np.int64) - np.ones((q, q), dtype=np.int64)
    assert np.array_equal(jac @ jac.T, expected)
    assert np.array_equal(jac.T, jac if q % 4 == 1 else -jac)


def test_prime_power() -> None:
    assert prime_power(27) == (3, 3) and prime_power(47) == (47, 1) and prime_power(12) is None
    with pytest.raises(ValueError, match="GF\\(35\\)"):
        jacobsthal(35)


@pytest.mark.parametrize("n", [1, 2, 4, 12, 20, 28, 36, 52, 64, 96, 100, 128, 244, 576, 640, 896, 960, 1152])
def test_hadamard_matrix(n: int) -> None:
    h = hadamard_matrix(n)
    assert h.dtype == torch.float64 and set(h.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))


def test_named_model_widths_have_constructions() -> None:
    assert describe_factors(hadamard_factors(576)) == "paley1 12 (q=11) x paley1 12 (q=11) x sylvester 4"
    assert describe_factors(hadamard_factors(640)) == "paley1 20 (q=19) x sylvester 32"
    assert describe_factors(hadamard_factors(256)) == "sylvester 256"
    assert hadamard_factors(172) is None and hadamard_factors(6) is None
    with pytest.raises(ValueError, match="order 172"):
        hadamard_matrix(172)


@pytest.mark.parametrize(("n", "kind", "used"), [(576, "hadamard", "hadamard"), (172, "hadamard", "random"),
                                                  (64, "random", "random")])  # fmt: skip
def test_orthogonal_rotation_is_orthogonal_and_records_its_construction(n: int, kind: str, used: str) -> None:
    rotation = orthogonal_rotation(n, kind, 0, "residual")
    assert rotation.kind == used and rotation.size == n and rotation.matrix.dtype == torch.float64
    eye = torch.eye(n, dtype=torch.float64)
    assert float((rotation.matrix @ rotation.matrix.T - eye).abs().max()) < 1e-12
    if used == "hadamard":
        assert torch.allclose(rotation.matrix.abs(), torch.full((n, n), n**-0.5, dtype=torch.float64))
    else:
        assert rotation.construction == "gaussian qr"


def test_rotations_are_deterministic_per_seed_and_purpose() -> None:
    a = randomized_hadamard(128, 3, "residual")
    assert a is not None
    assert torch.equal(a.matrix, randomized_hadamard(128, 3, "residual").matrix)  # type: ignore[union-attr]
    assert not torch.equal(a.matrix, randomized_hadamard(128, 4, "residual").matrix)  # type: ignore[union-attr]
    assert not torch.equal(a.matrix, randomized_hadamard(128, 3, "head").matrix)  # type: ignore[union-attr]
    r = random_orthogonal(48, 1)
    assert torch.equal(r.matrix, random_orthogonal(48, 1).matrix)
    assert bool((torch.diagonal(torch.linalg.qr(r.matrix).R) != 0).all())
    with pytest.raises(ValueError, match="rotation kind"):
        orthogonal_rotation(8, "learned", 0, "residual")
