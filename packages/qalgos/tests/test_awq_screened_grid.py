"""AWQ's screened grid search: the exact search's ratio, scales and loss bits, with fewer exact losses."""

import math

import pytest
import torch
from qalgos.awq import best_on_grid, search_statistics
from qalgos.awq_gram import gram_matrix, gram_output_mse, gram_screen_mse, search_scales_gram
from qalgos.awq_screened_grid import FINE_MARGIN, SAFETY, SCREEN_MARGIN, best_on_grid_screened, relative_error
from qalgos.errors import NumericalError
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, sym=False)


def problem(seed: int, tokens: int = 512, width: int = 128):
    """Outlier-heavy inputs ``[tokens, width]`` and two weights that read them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, width, generator=gen)
    x[:, torch.randperm(width, generator=gen)[:4]] *= 20.0
    weights = [torch.randn(96, width, generator=gen) * 0.05, torch.randn(32, width, generator=gen) * 0.05]
    return x, weights


def counted(fn):
    calls = []

    def wrapped(trial):
        calls.append(1)
        return fn(trial)

    return wrapped, calls


@pytest.mark.parametrize("seed", range(6))
def test_screened_gram_search_gives_the_exact_searchs_bits(seed: int) -> None:
    x, weights = problem(seed)
    exact = search_scales_gram(x, weights, SPEC, screen=False)
    screened = search_scales_gram(x, weights, SPEC)
    assert screened.ratio == exact.ratio
    assert screened.loss == exact.loss  # the same float64 loss of the same trial, not an approximation
    assert torch.equal(screened.scales, exact.scales)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_screen_scores_few_ratios_exactly(dtype: torch.dtype) -> None:
    x, weights = problem(7)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    gram = gram_matrix(x)
    gram_low = gram.to(dtype)
    loss_of, exact_calls = counted(lambda trial: gram_output_mse(gram, 512, weights, trial))
    screen_of, screen_calls = counted(lambda trial: gram_screen_mse(gram_low, 512, weights, trial))
    result = best_on_grid_screened(x_mean, w_mean, weights, SPEC, [(screen_of, SCREEN_MARGIN)], loss_of)
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, lambda trial: gram_output_mse(gram, 512, weights, trial))
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss)
    assert len(screen_calls) == 20
    assert 1 <= len(exact_calls) < 20


def test_a_poor_screen_falls_back_to_every_exact_loss() -> None:
    x, weights = problem(3)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    gram = gram_matrix(x)

    def exact(trial):
        return gram_output_mse(gram, 512, weights, trial)

    # an estimate 5% off on every ratio, in alternating directions: its shortlist could miss the winner
    offsets = iter([1.05, 0.95] * 10)
    loss_of, exact_calls = counted(exact)
    result = best_on_grid_screened(
        x_mean, w_mean, weights, SPEC, [(lambda t: exact(t) * next(offsets), SCREEN_MARGIN)], loss_of
    )
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, exact)
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss)
    assert torch.equal(result.scales, plain.scales)
    assert len(exact_calls) == 20


def test_a_nan_estimate_is_scored_exactly_and_all_nan_losses_raise() -> None:
    x, weights = problem(4)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    gram = gram_matrix(x)
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, lambda trial: gram_output_mse(gram, 512, weights, trial))
    result = best_on_grid_screened(
        x_mean, w_mean, weights, SPEC, [(lambda t: math.nan, 0.01)], lambda t: gram_output_mse(gram, 512, weights, t)
    )
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss)
    with pytest.raises(NumericalError, match="every one of the 20 ratios gave a NaN"):
        best_on_grid_screened(x_mean, w_mean, weights, SPEC, [(lambda t: 1.0, 0.01)], lambda t: math.nan)


def test_relative_error_and_the_check_bound() -> None:
    assert relative_error(1.0, 1.0) == 0.0
    assert relative_error(0.0, 0.0) == 0.0
    assert relative_error(1e-3, 0.0) == math.inf
    assert relative_error(math.nan, 1.0) == math.inf
    assert relative_error(1.01, 1.0) == pytest.approx(0.01)
    assert SCREEN_MARGIN / SAFETY > 1e-4  # room above the bfloat16 screen's measured error (about 1e-4)


def test_two_tiers_keep_the_bits_on_a_flat_loss_curve() -> None:
    """Uniform inputs and weights: every ratio's loss within about 1% (the bfloat16 tier keeps many); the
    float32 tier narrows them and the result is still the float64 search's."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(512, 128, generator=gen)
    weights = [torch.randn(64, 128, generator=gen) * 0.05]
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    gram = gram_matrix(x)
    low, fine = gram.to(torch.bfloat16), gram.to(torch.float32)
    loss_of, exact_calls = counted(lambda trial: gram_output_mse(gram, 512, weights, trial))
    fine_of, fine_calls = counted(lambda trial: gram_screen_mse(fine, 512, weights, trial))
    screens = [(lambda trial: gram_screen_mse(low, 512, weights, trial), SCREEN_MARGIN), (fine_of, FINE_MARGIN)]
    result = best_on_grid_screened(x_mean, w_mean, weights, SPEC, screens, loss_of)
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, lambda trial: gram_output_mse(gram, 512, weights, trial))
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss)
    assert torch.equal(result.scales, plain.scales)
    assert len(exact_calls) <= len(fine_calls) <= 20
    assert search_scales_gram(x, weights, SPEC).loss == search_scales_gram(x, weights, SPEC, screen=False).loss
