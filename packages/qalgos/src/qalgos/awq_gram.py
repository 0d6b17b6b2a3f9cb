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

Each ratio is first screened by the same loss with ``D`` and ``G`` in bfloat16 (:func:`gram_screen_mse`, on
a device that multiplies bfloat16 fast), the ratios within 1% of the lowest estimate again in float32 (a flat
loss curve, as on random weights, keeps many), and only those within 1e-5 of the lowest float32 estimate are
scored in float64 (:func:`qalgos.awq_screened_grid.best_on_grid_screened`): the same ratio, scales and loss
bits as scoring every ratio in float64, at a fraction of the float64 products (at ``in`` = 14336 each is
1.7 TFLOP); ``screen=False`` scores every ratio in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .awq import ScaleSearchResult, best_on_grid, search_statistics
from .awq_screened_grid import FINE_MARGIN, SCREEN_MARGIN, best_on_grid_screened
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


def screen_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the screening products on ``device``: bfloat16 on CUDA and on a CPU whose oneDNN runs
    bfloat16 GEMMs (AVX-512 and up), float32 elsewhere (where bfloat16 would be emulated, slower)."""
    if device.type == "cuda":
        return torch.bfloat16
    if device.type != "cpu":
        return torch.float32
    try:  # a torch built without oneDNN has no such op: float32, which changes only the speed
        fast = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        fast = False
    return torch.bfloat16 if fast else torch.float32


def gram_screen_mse(
    gram_low: torch.Tensor, tokens: int, weights: Sequence[torch.Tensor], trial: Sequence[torch.Tensor]
) -> float:
    """:func:`gram_output_mse` estimated with the product ``D G`` in ``gram_low``'s dtype (``gram_low [in, in]``:
    the Gram matrix already in it; ``D`` formed in float32, then converted), the elementwise product with ``D``
    and the sum in float32/float64: a screening value, about 1e-4 relative off the float64 loss in bfloat16."""
    total = 0.0
    outputs = 0
    for wj, tj in zip(weights, trial, strict=True):
        diff = wj.to(torch.float32) - tj.to(torch.float32)
        product = (diff.to(gram_low.dtype) @ gram_low).to(torch.float32)
        total += float(product.mul_(diff).sum(dtype=torch.float64))
        outputs += int(wj.shape[0])
    return total / (tokens * outputs)


def search_scales_gram(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    spec: QuantSpec,
    grid: int = 20,
    duo_scaling: bool = True,
    screen: bool = True,
) -> ScaleSearchResult:
    """The AWQ grid search (:func:`qalgos.awq.best_on_grid`) for linears ``weights [out_j, in]`` that all read
    ``x [..., in]`` and are inspected on their own concatenated outputs (biases cancel in the difference);
    ``loss`` is that output MSE, computed in Gram form. ``screen``: score in float64 only the ratios near the
    best bfloat16 estimate (the same result; see the module docstring); ``False`` scores every ratio."""
    x_mean, w_mean = search_statistics(x, weights, spec)
    gram = gram_matrix(x)
    tokens = max(1, x.numel() // x.shape[-1])
    reference = [wj.detach() for wj in weights]

    def loss_of(trial: list[torch.Tensor]) -> float:
        return gram_output_mse(gram, tokens, reference, trial)

    if not screen:
        return best_on_grid(x_mean, w_mean, weights, spec, loss_of, grid, duo_scaling)
    coarse = screen_dtype(gram.device)
    grams = {dtype: gram.to(dtype) for dtype in dict.fromkeys((coarse, torch.float32))}

    def screen_in(dtype: torch.dtype) -> Callable[[list[torch.Tensor]], float]:
        return lambda trial: gram_screen_mse(grams[dtype], tokens, reference, trial)

    screens = [(screen_in(torch.float32), FINE_MARGIN)]
    if coarse != torch.float32:  # ratios far from the best leave at the bfloat16 tier, near-ties at float32
        screens.insert(0, (screen_in(coarse), SCREEN_MARGIN))
    return best_on_grid_screened(x_mean, w_mean, weights, spec, screens, loss_of, grid, duo_scaling)
