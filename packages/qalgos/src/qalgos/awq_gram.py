"""AWQ scale search for linears inspected on their own outputs, with the loss in Gram form.

When the inspected block is the scaled linears themselves (``o_proj``, ``down_proj``: no ``inspect``
module), the block output error of a trial ``W_q`` is linear in the weight difference ``D = W - W_q``:
``mean((x Wᵀ - x W_qᵀ)²) = tr(D G Dᵀ) / (tokens · out)`` with ``G = xᵀx [in, in]``. ``G`` is built once
per search (float32 GEMM over the tokens, then held in float64); each grid ratio then costs an
``[out, in] x [in, in]`` product instead of a ``[tokens, in] x [in, out]`` forward plus the loss, which
is cheaper whenever ``in < tokens`` (SmolLM2's ``down_proj`` at 8192 tokens: 5x fewer FLOPs per ratio).

The chosen ratio is the one the output-form search (:func:`qalgos.awq.search_scales`) would choose up to
float rounding of the loss: the two losses are equal in exact arithmetic, so only ratios whose losses
agree to about 1e-6 relative can swap (tested on random and outlier-heavy inputs).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .awq import ScaleSearchResult, best_on_grid, search_statistics
from .spec import QuantSpec


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """``G = xᵀx`` ``[in, in]`` float64 of inputs ``x [..., in]`` (accumulated as a float32 GEMM)."""
    rows = x.detach().reshape(-1, x.shape[-1]).to(torch.float32)
    return (rows.T @ rows).to(torch.float64)


def gram_output_mse(
    gram: torch.Tensor, tokens: int, weights: Sequence[torch.Tensor], trial: Sequence[torch.Tensor]
) -> float:
    """Mean over ``tokens x sum(out_j)`` of the squared output difference of ``weights`` and ``trial``
    (each ``[out_j, in]``) on the inputs whose Gram matrix is ``gram [in, in]`` float64."""
    total = torch.zeros((), dtype=torch.float64)
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        diff = wj.to(torch.float64) - tj.to(torch.float64)
        total += ((diff @ gram) * diff).sum()
        outputs += int(wj.shape[0])
    return float(total / (tokens * outputs))


def search_scales_gram(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
) -> ScaleSearchResult:
    """The AWQ grid search (:func:`qalgos.awq.best_on_grid`) for linears ``weights [out_j, in]`` that all read
    ``x [..., in]`` and are inspected on their own concatenated outputs (biases cancel in the difference);
    ``loss`` is that output MSE, computed in Gram form."""
    x_mean, w_mean = search_statistics(x, weights, spec)
    gram = gram_matrix(x)
    tokens = max(1, x.numel() // x.shape[-1])
    reference = [wj.detach() for wj in weights]
    return best_on_grid(
        x_mean, w_mean, weights, spec, lambda trial: gram_output_mse(gram, tokens, reference, trial), grid, duo_scaling
    )
