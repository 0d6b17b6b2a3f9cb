"""EoRA: the adapter is the best rank-r correction in the activation-weighted norm (checked against the
singular values of a direct computation), reduces the layer-output error, is scale-free in the covariance."""

from __future__ import annotations

import pytest
import torch
from conftest import correlated_activations
from qalgos.eora import eora_adapter
from qalgos.errors import ShapeError, SpecError
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(4))
    x = correlated_activations(1024, 64, seed=3)
    task = GPTQ(64, QuantSpec(bits=3, group_size=32))
    task.add_batch(x)
    return w, task.quantize(w).dequantized, x


def _output_error(x: torch.Tensor, d: torch.Tensor) -> float:
    return float(((x.double() @ d.double().T) ** 2).sum())


@pytest.mark.parametrize("rank", [1, 4, 16])
def test_adapter_is_the_optimal_weighted_low_rank_correction(rank: int) -> None:
    w, q, x = _case()
    error = w - q
    adapter = eora_adapter(error, x.T @ x, rank)
    assert adapter.a.shape == (rank, 64) and adapter.b.shape == (48, rank) and adapter.dropped == 0
    before = _output_error(x, error)
    after = _output_error(x, error - adapter.delta())
    # Eckart-Young in the weighted space: the residual is the tail of the singular values of X Dᵀ
    singular = torch.linalg.svdvals(x.double() @ error.double().T)
    optimal = float((singular[rank:] ** 2).sum())
    assert after < before
    assert after == pytest.approx(optimal, rel=1e-3)


def test_full_rank_removes_the_error_and_scale_does_not_matter() -> None:
    w, q, x = _case()
    cov = x.T @ x
    full = eora_adapter(w - q, cov, 200)  # capped at min(out, in) = 48
    assert full.rank == 48
    assert _output_error(x, w - q - full.delta()) < 1e-6 * _output_error(x, w - q)
    scaled = eora_adapter(w - q, cov * (2.0 / 1024), 8)
    assert torch.allclose(scaled.delta(), eora_adapter(w - q, cov, 8).delta(), atol=1e-5)


def test_rank_deficient_covariance_is_truncated() -> None:
    w, q, _ = _case()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))  # rank 16 < 64
    adapter = eora_adapter(w - q, x.T @ x, 8)
    assert adapter.dropped >= 64 - 16 and torch.isfinite(adapter.delta()).all()
    assert _output_error(x, w - q - adapter.delta()) < _output_error(x, w - q)


def test_bad_input_is_named() -> None:
    with pytest.raises(SpecError, match=r"adapter\.rank"):
        eora_adapter(torch.zeros(4, 4), torch.eye(4), 0)
    with pytest.raises(ShapeError, match="covariance"):
        eora_adapter(torch.zeros(4, 4), torch.eye(3), 2)
