"""EoRA: a low-rank adapter of a module's quantization error in the activation-weighted space.

Given the error ``D = W - Q`` ``[out, in]`` and the calibration covariance ``C = sum x xᵀ`` ``[in, in]`` (any
positive scale), EoRA finds ``B [out, r]``, ``A [r, in]`` minimising ``||(D - B A) C^(1/2)||_F``, i.e. the
layer-output error ``sum_x ||(D - B A) x||²`` on the calibration inputs: with ``C = V diag(λ) Vᵀ`` and
``S = V diag(√λ)``, the truncated SVD ``D S ≈ U_r Σ_r Z_rᵀ`` gives ``B = U_r Σ_r^(1/2)`` and
``A = Σ_r^(1/2) Z_rᵀ S⁺`` (``S⁺ = diag(1/√λ) Vᵀ``). As in GPT-QModel 7.7.0 (``eora/eora.py``), eigenvalues
at or below ``max(λ) * min(1, in * eps_float32)`` are dropped (a truncated pseudo-inverse) and the
eigen-decomposition runs in float64, the SVD in float32. The corrected module computes
``y = x Qᵀ + (x Aᵀ) Bᵀ``; ``B A`` does not depend on the scale of ``C``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ShapeError, SpecError


@dataclass(frozen=True)
class LowRankAdapter:
    """``a`` ``[rank, in]`` and ``b`` ``[out, rank]`` float32 (PEFT's ``lora_A.weight`` / ``lora_B.weight``);
    ``dropped`` counts the covariance eigenvalues left out as numerically zero."""

    a: torch.Tensor
    b: torch.Tensor
    dropped: int

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])

    def delta(self) -> torch.Tensor:
        """``B A`` ``[out, in]`` float32: what the adapter adds to the quantized weight."""
        return self.b @ self.a


def eora_adapter(error: torch.Tensor, covariance: torch.Tensor, rank: int) -> LowRankAdapter:
    """The EoRA adapter of ``error`` ``[out, in]`` (``W - Q``) under ``covariance`` ``[in, in]`` at ``rank``
    (capped at ``min(out, in)``). Raises :class:`SpecError` for a bad rank, :class:`ShapeError` for
    mismatched or non-finite inputs."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise SpecError(f"adapter.rank: expected a positive integer, found {rank!r}")
    if error.ndim != 2:
        raise ShapeError(f"error: expected [out, in], found shape {tuple(error.shape)}")
    in_ = error.shape[1]
    if tuple(covariance.shape) != (in_, in_):
        raise ShapeError(f"covariance: expected [{in_}, {in_}] for an error of shape {tuple(error.shape)}, "
                         f"found {tuple(covariance.shape)}")  # fmt: skip
    if not bool(torch.isfinite(error).all()) or not bool(torch.isfinite(covariance).all()):
        raise ShapeError("error/covariance: contain NaN or infinity")
    rank = min(rank, *error.shape)
    eigenvalues, vectors = torch.linalg.eigh(covariance.detach().to("cpu", torch.float64))
    tolerance = min(1.0, in_ * torch.finfo(torch.float32).eps)
    keep = eigenvalues > eigenvalues[-1].clamp_min(0.0) * tolerance
    root = torch.zeros_like(eigenvalues)
    inv_root = torch.zeros_like(eigenvalues)
    root[keep] = eigenvalues[keep].sqrt()
    inv_root[keep] = eigenvalues[keep].rsqrt()
    scale = (vectors * root.unsqueeze(0)).to(torch.float32)
    scale_inv = (inv_root.unsqueeze(1) * vectors.T).to(torch.float32)
    u, s, vh = torch.linalg.svd(error.detach().to("cpu", torch.float32) @ scale, full_matrices=False)
    half = s[:rank].sqrt()
    b = u[:, :rank] * half.unsqueeze(0)
    a = half.unsqueeze(1) * (vh[:rank] @ scale_inv)
    return LowRankAdapter(a.contiguous(), b.contiguous(), int((~keep).sum()))
