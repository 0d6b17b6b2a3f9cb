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

Every ratio is scored first with the same loss in float32 (:func:`float32_output_mse`: the product ``D G`` in
float32 on the Gram form, or ``x Dᵀ`` on the recorded inputs when they have fewer rows than ``in``, whichever
is fewer FLOPs), and every ratio whose float32 loss is within a float32 error estimate of the float32 best is
scored again in float64 and chosen by it (:func:`qalgos.awq_rescored_grid.best_on_grid_rescored`, which states
the estimate and when the choice can differ from scoring all 20 in float64): at ``in`` = 14336 a float64
product is 1.7 TFLOP, its float32 one about half the time. ``rescore=False`` scores every ratio in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from .awq import ScaleSearchResult, best_on_grid, search_statistics
from .awq_rescored_grid import RescoreCount, best_on_grid_rescored
from .spec import QuantSpec


def float32_rows(x: torch.Tensor) -> torch.Tensor:
    """Inputs ``x [..., in]`` as float32 rows ``[tokens, in]`` (``x`` itself when it already is)."""
    return x.detach().reshape(-1, x.shape[-1]).to(torch.float32)


def float32_gram(x: torch.Tensor) -> torch.Tensor:
    """``G = xᵀx`` ``[in, in]`` as the float32 GEMM of inputs ``x [..., in]`` (what :func:`gram_matrix` widens)."""
    rows = float32_rows(x)
    return rows.T @ rows


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """``G = xᵀx`` ``[in, in]`` float64 of inputs ``x [..., in]`` (accumulated as a float32 GEMM)."""
    return float32_gram(x).to(torch.float64)


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


def float32_output_mse(
    operand32: torch.Tensor,
    form: Literal["gram", "rows"],
    tokens: int,
    weights: Sequence[torch.Tensor],
    trial: Sequence[torch.Tensor],
) -> float:
    """:func:`gram_output_mse` with its product in float32. ``form`` ``"gram"``: ``operand32`` is the float32
    Gram matrix ``[in, in]`` and the product ``D G``; ``"rows"``: ``operand32`` is the recorded inputs
    ``[tokens, in]`` float32 and the product ``x Dᵀ`` (fewer FLOPs when ``tokens < in``). ``D`` is formed in
    float32; the products with ``D`` (or the squares) are summed in float64."""
    total = 0.0
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        diff = wj.to(torch.float32) - tj.to(torch.float32)
        product = (diff @ operand32).mul_(diff) if form == "gram" else (operand32 @ diff.T).square_()
        total += float(product.sum(dtype=torch.float64))
        outputs += int(wj.shape[0])
    return total / (tokens * outputs)


def search_scales_gram(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
    rescore: bool = True,
    counts: list[RescoreCount] | None = None,
) -> ScaleSearchResult:
    """The AWQ grid search (:func:`qalgos.awq.best_on_grid`) for linears ``weights [out_j, in]`` that all read
    ``x [..., in]`` and are inspected on their own concatenated outputs (biases cancel in the difference);
    ``loss`` is that output MSE, computed in Gram form in float64. ``rescore``: score every ratio in float32
    and in float64 only those near the float32 best (see the module docstring; ``counts`` receives how many);
    ``False`` scores every ratio in float64."""
    x_mean, w_mean = search_statistics(x, weights, spec)
    gram32 = float32_gram(x)
    gram = gram32.to(torch.float64)  # gram_matrix(x); the float32 product is kept for the float32 scoring
    in_ = x.shape[-1]
    tokens = max(1, x.numel() // in_)
    reference = [wj.detach() for wj in weights]

    def loss_of(trial: list[torch.Tensor]) -> float:
        return gram_output_mse(gram, tokens, reference, trial)

    if not rescore:
        del gram32
        return best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling)
    if x.numel() // in_ < in_:  # fewer rows than in: x Dᵀ is 2·tokens·in·out FLOPs against D G's 2·out·in²
        form: Literal["gram", "rows"] = "rows"
        operand32 = float32_rows(x)
        del gram32
    else:
        form, operand32 = "gram", gram32

    def estimate_of(trial: list[torch.Tensor]) -> float:
        return float32_output_mse(operand32, form, tokens, reference, trial)

    return best_on_grid_rescored(x_mean, w_mean, weights, spec, estimate_of, loss_of, grid, duo_scaling, counts)
