"""Streaming accumulation of the GPTQ Hessian ``H = 2/N * sum_t x_t x_tᵀ`` from activation batches.

Each batch's product ``xᵀx`` is formed in float32 (like the reference) and added to a running sum kept
unscaled in float64 ``[in, in]``, with the token count kept separately; so many batches do not lose
precision, and a resumed accumulator continues exactly where it stopped. The float32 products are
plain matmuls whose results do not depend on the torch thread count.
"""

from __future__ import annotations

import torch

from .errors import ShapeError, StateError

GRAM_BLOCKS = 4
GRAM_MIN_BLOCK = 256


def add_gram(acc: torch.Tensor, x: torch.Tensor) -> None:
    """``acc += xᵀx`` for ``x [tokens, in]`` float32 into a float64 ``acc [in, in]``.

    The product is formed in float32 (as the reference does) block by block over the lower triangle and
    mirrored, which saves up to 3/8 of the multiply-adds of a full ``xᵀx``; the blocks are added in a fixed
    order into the float64 sum.
    """
    n = x.shape[1]
    parts = max(1, min(GRAM_BLOCKS, n // GRAM_MIN_BLOCK))
    edges = [n * k // parts for k in range(parts + 1)]
    for i in range(parts):
        rows = slice(edges[i], edges[i + 1])
        for j in range(i + 1):
            cols = slice(edges[j], edges[j + 1])
            block = (x[:, rows].T @ x[:, cols]).to(torch.float64)
            acc[rows, cols] += block
            if i != j:
                acc[cols, rows] += block.T


class HessianAccumulator:
    """Accumulates ``sum x xᵀ`` over tokens ``x: [in]``; masked tokens are excluded."""

    def __init__(self, in_features: int) -> None:
        if in_features <= 0:
            raise ShapeError(f"in_features: expected a positive integer, found {in_features}")
        self.in_features = in_features
        self.sum = torch.zeros(in_features, in_features, dtype=torch.float64)
        self.nsamples = 0

    def add_batch(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Add activations ``x: [..., in]``; ``mask: [...]`` bool keeps the True tokens. Returns tokens added."""
        if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] != self.in_features:
            found = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ShapeError(f"x: expected [..., {self.in_features}] activations, found {found}")
        if not x.dtype.is_floating_point:
            raise ShapeError(f"x: expected a floating dtype, found {x.dtype}")
        flat = x.detach().reshape(-1, self.in_features)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(x.shape[:-1]):
                found = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise ShapeError(f"mask: expected shape {tuple(x.shape[:-1])} matching x[..., :-1], found {found}")
            flat = flat[mask.reshape(-1).to(torch.bool)]
        tokens = int(flat.shape[0])
        if tokens == 0:
            return 0
        if not bool(torch.isfinite(flat).all()):
            raise ShapeError("x: activations contain NaN or infinity")
        add_gram(self.sum, flat.to(device=self.sum.device, dtype=torch.float32))
        self.nsamples += tokens
        return tokens

    def hessian(self) -> torch.Tensor:
        """``2/N * sum x xᵀ`` as float32 ``[in, in]`` (zeros when no token was seen)."""
        if self.nsamples == 0:
            return torch.zeros(self.in_features, self.in_features, dtype=torch.float32)
        return (self.sum * (2.0 / self.nsamples)).to(torch.float32)

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """``{"hessian_sum": float64 [in, in], "nsamples": int, "in_features": int}`` (a copy)."""
        return {"hessian_sum": self.sum.clone(), "nsamples": self.nsamples, "in_features": self.in_features}

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Restore from :meth:`state_dict`; names the key that is missing or wrong."""
        for key in ("hessian_sum", "nsamples", "in_features"):
            if key not in state:
                raise StateError(f"{key}: missing from the GPTQ state (found keys {sorted(state)})")
        if int(state["in_features"]) != self.in_features:
            raise StateError(f"in_features: expected {self.in_features}, found {state['in_features']}")
        total = state["hessian_sum"]
        shape = (self.in_features, self.in_features)
        if not isinstance(total, torch.Tensor) or tuple(total.shape) != shape:
            found = tuple(total.shape) if isinstance(total, torch.Tensor) else type(total).__name__
            raise StateError(f"hessian_sum: expected a tensor of shape {shape}, found {found}")
        nsamples = int(state["nsamples"])
        if nsamples < 0:
            raise StateError(f"nsamples: expected >= 0, found {nsamples}")
        self.sum = total.detach().to(torch.float64).clone()
        self.nsamples = nsamples
