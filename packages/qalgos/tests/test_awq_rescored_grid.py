"""AWQ's rescored grid search: scored in float32, the near-best re-scored in float64, the float64 choice."""

import math

import pytest
import torch
from qalgos.awq import best_on_grid, grid_scales, grid_trial, search_statistics
from qalgos.awq_gram import float32_output_mse, gram_matrix, gram_output_mse, search_scales_gram
from qalgos.awq_rescored_grid import EPS32, SAFETY, best_on_grid_rescored, error_estimate, relative_error
from qalgos.errors import NumericalError
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, sym=False)


def problem(seed: int, tokens: int = 512, width: int = 128, outliers: bool = True):
    """Inputs ``[tokens, width]`` (a few channels 20x larger when ``outliers``) and two weights reading them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, width, generator=gen)
    if outliers:
        x[:, torch.randperm(width, generator=gen)[:4]] *= 20.0
    weights = [torch.randn(96, width, generator=gen) * 0.05, torch.randn(32, width, generator=gen) * 0.05]
    return x, weights


def counted(fn):
    calls = []

    def wrapped(trial):
        calls.append(1)
        return fn(trial)

    return wrapped, calls


def by_ratio(x_mean, w_mean, weights, values):
    """A loss function of a trial that returns ``values[i]`` for grid ratio ``i``'s trial weights (identified by
    their bits), so that a test can set every ratio's loss."""
    trials = [grid_trial(weights, grid_scales(x_mean, w_mean, i / 20), SPEC) for i in range(20)]
    assert len({tuple(t[0].flatten()[:64].tolist()) for t in trials}) == 20  # every trial distinct

    def loss(trial):
        for i, candidate in enumerate(trials):
            if all(torch.equal(a, b) for a, b in zip(trial, candidate, strict=True)):
                return values[i]
        raise AssertionError("not a grid trial")

    return loss


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("tokens", "outliers"), [(512, True), (512, False), (64, True), (64, False)])
def test_rescored_gram_search_gives_the_float64_searchs_bits(seed: int, tokens: int, outliers: bool) -> None:
    """Both float32 forms (Gram at 512 tokens, rows at 64 < in = 128), outlier-heavy and flat loss curves."""
    x, weights = problem(seed, tokens, outliers=outliers)
    exact = search_scales_gram(x, weights, SPEC, rescore=False)
    counts = []
    rescored = search_scales_gram(x, weights, SPEC, counts=counts)
    assert rescored.ratio == exact.ratio
    assert rescored.loss == exact.loss  # the same float64 loss of the same trial, not an approximation
    assert torch.equal(rescored.scales, exact.scales)
    assert counts[0].float32 == 20 and 1 <= counts[0].float64 < 20 and not counts[0].fell_back


@pytest.mark.parametrize("form", ["gram", "rows"])
def test_float32_loss_is_close_to_the_float64_loss(form: str) -> None:
    x, weights = problem(5)
    gram = gram_matrix(x)
    trial = [w + 0.01 for w in weights]
    operand = gram.to(torch.float32) if form == "gram" else x
    low = float32_output_mse(operand, form, 512, weights, trial)
    assert relative_error(low, gram_output_mse(gram, 512, weights, trial)) < error_estimate(0.0, 128)


def test_a_near_tie_flipped_by_float32_is_chosen_by_float64() -> None:
    """Ratios 7 and 12 a hair apart in float64 (1e-9), their float32 losses in the other order: both are
    re-scored and the float64 best (12) wins, as when every ratio is scored in float64."""
    x, weights = problem(1)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    exact = [1.0 + 0.01 * abs(i - 10) for i in range(20)]
    exact[7], exact[12] = 0.5 + 1e-9, 0.5
    estimate = list(exact)
    estimate[7], estimate[12] = 0.5 * (1 - 1e-7), 0.5 * (1 + 1e-7)
    loss_of, exact_calls = counted(by_ratio(x_mean, w_mean, weights, exact))
    result = best_on_grid_rescored(x_mean, w_mean, weights, SPEC, by_ratio(x_mean, w_mean, weights, estimate), loss_of)
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, by_ratio(x_mean, w_mean, weights, exact))
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss) == (0.6, 0.5)
    assert torch.equal(result.scales, plain.scales)
    assert len(exact_calls) == 2


def test_equal_float64_losses_keep_the_first_ratio() -> None:
    x, weights = problem(2)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    exact = [1.0] * 20
    exact[4] = exact[9] = 0.25
    estimate = list(exact)
    estimate[9] = 0.25 * (1 - 1e-8)  # float32 prefers the later one
    result = best_on_grid_rescored(
        x_mean,
        w_mean,
        weights,
        SPEC,
        by_ratio(x_mean, w_mean, weights, estimate),
        by_ratio(x_mean, w_mean, weights, exact),
    )
    assert (result.ratio, result.loss) == (0.2, 0.25)


def test_an_estimate_off_by_more_than_its_bound_scores_every_ratio_in_float64() -> None:
    """The float32 best is exact, so the estimate is the floor; ratio 3 is re-scored and found 1e-3 off:
    the premise fails and all 20 are scored in float64 (ratio 15, which float32 put far away, wins)."""
    x, weights = problem(3)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    exact = [1.0] * 20
    exact[0], exact[3], exact[15] = 0.5, 0.5 * (1 + 1e-3), 0.4
    estimate = list(exact)
    estimate[3], estimate[15] = 0.5, 0.9
    loss_of, exact_calls = counted(by_ratio(x_mean, w_mean, weights, exact))
    counts = []
    result = best_on_grid_rescored(
        x_mean, w_mean, weights, SPEC, by_ratio(x_mean, w_mean, weights, estimate), loss_of, counts=counts
    )
    assert (result.ratio, result.loss) == (0.75, 0.4)
    assert len(exact_calls) == 20 and counts[0].fell_back


def test_nan_estimates_are_rescored_and_all_nan_losses_raise() -> None:
    x, weights = problem(4)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    gram = gram_matrix(x)

    def exact(trial):
        return gram_output_mse(gram, 512, weights, trial)

    plain = best_on_grid(x_mean, w_mean, weights, SPEC, exact)
    result = best_on_grid_rescored(x_mean, w_mean, weights, SPEC, lambda t: math.nan, exact)
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss)
    with pytest.raises(NumericalError, match="every one of the 20 ratios gave a NaN"):
        best_on_grid_rescored(x_mean, w_mean, weights, SPEC, lambda t: 1.0, lambda t: math.nan)


def test_error_estimate_and_relative_error() -> None:
    assert error_estimate(0.0, 14336) == pytest.approx(math.sqrt(14336) * EPS32)
    assert error_estimate(1e-6, 128) == pytest.approx(SAFETY * 1e-6)
    assert relative_error(1.0, 1.0) == 0.0
    assert relative_error(0.0, 0.0) == 0.0
    assert relative_error(1e-3, 0.0) == math.inf
    assert relative_error(math.nan, 1.0) == math.inf
    assert relative_error(1.01, 1.0) == pytest.approx(0.01)


@pytest.mark.parametrize("rescore", [True, False])
def test_one_or_two_threads_give_the_same_bits(rescore: bool) -> None:
    """Large enough for the GEMMs and the elementwise passes to split across threads. The chosen ratio and its
    scales (what reaches the checkpoint) are the same bits; the float64 loss is the same up to the order of its
    sum, which ATen splits by thread (on main as well)."""
    x, weights = problem(6, tokens=2048, width=512)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(search_scales_gram(x, weights, SPEC, rescore=rescore))
    finally:
        torch.set_num_threads(before)
    one, two = results
    assert one.ratio == two.ratio
    assert torch.equal(one.scales, two.scales)
    assert one.loss == pytest.approx(two.loss, rel=1e-12)
