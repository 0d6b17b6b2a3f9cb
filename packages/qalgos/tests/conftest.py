"""Shared synthetic data: small weights and activations with known structure."""

from __future__ import annotations

import pytest
import torch
from qalgos.gptq import GPTQ
from qalgos.result import QuantResult
from qalgos.spec import QuantSpec


def correlated_activations(tokens: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """``[tokens, in]`` activations with strongly correlated channels (a random mixing plus noise)."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(in_features, in_features, generator=gen) / in_features**0.5
    return torch.randn(tokens, in_features, generator=gen) @ mix + 0.05 * torch.randn(
        tokens, in_features, generator=gen
    )


def outlier_activations(tokens: int, in_features: int, outliers: int = 4, gain: float = 30.0, seed: int = 0):
    """Correlated activations where ``outliers`` channels carry ``gain`` times larger values."""
    x = correlated_activations(tokens, in_features, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    idx = torch.randperm(in_features, generator=gen)[:outliers]
    x[:, idx] *= gain
    return x, idx


def run_gptq(w: torch.Tensor, x: torch.Tensor, spec: QuantSpec) -> QuantResult:
    """One GPTQ solve of ``w [out, in]`` from activations ``x [tokens, in]``."""
    gptq = GPTQ(w.shape[1], spec)
    gptq.add_batch(x)
    return gptq.quantize(w)


def output_error(x: torch.Tensor, w: torch.Tensor, q: torch.Tensor) -> float:
    """``||X Wᵀ - X Qᵀ||² / tokens``."""
    return float(((x @ w.T - x @ q.T) ** 2).sum() / x.shape[0])


@pytest.fixture
def weight() -> torch.Tensor:
    return torch.randn(48, 96, generator=torch.Generator().manual_seed(7))
