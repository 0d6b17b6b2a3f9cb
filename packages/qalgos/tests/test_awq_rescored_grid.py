"""AWQ's rescored grid search: scored in bfloat16 and float32, the near-best re-scored in float64, the float64
choice."""

import math

import pytest
import torch
from qalgos.awq import best_on_grid, grid_scales, grid_trial, search_statistics
from qalgos.awq_gram import (
    ReducedOperands,
    gram_matrix,
    gram_output_mse,
    native_bfloat16,
    reduced_output_mse,
    search_scales_gram,
)
from qalgos.awq_rescored_grid import (
    BF16_FLOOR,
    EPS32,
    EPS_BF16,
    SAFETY,
    best_on_grid_rescored,
    bfloat16_error_estimate,
    bfloat16_premise_holds,
    error_estimate,
    relative_error,
)
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


@pytest.mark.parametrize("bfloat16", [False, True])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("tokens", "outliers"), [(512, True), (512, False), (64, True), (64, False)])
def test_rescored_gram_search_gives_the_float64_searchs_bits(
    seed: int, tokens: int, outliers: bool, bfloat16: bool
) -> None:
    """Both reduced forms (Gram at 512 tokens, rows at 64 < in = 128), outlier-heavy and flat loss curves, with
    and without the bfloat16 tier."""
    x, weights = problem(seed, tokens, outliers=outliers)
    exact = search_scales_gram(x, weights, SPEC, rescore=False)
    counts = []
    rescored = search_scales_gram(x, weights, SPEC, counts=counts, bfloat16=bfloat16)
    assert rescored.ratio == exact.ratio
    assert rescored.loss == exact.loss  # the same float64 loss of the same trial, not an approximation
    assert torch.equal(rescored.scales, exact.scales)
    count = counts[0]
    assert 1 <= count.float64 < 20 and not count.fell_back and not count.bfloat16_fell_back
    if bfloat16:
        assert count.bfloat16 == 20 and 1 <= count.float32 <= 20
    else:
        assert count.bfloat16 == 0 and count.float32 == 20


@pytest.mark.parametrize("form", ["gram", "rows"])
def test_float32_loss_is_close_to_the_float64_loss(form: str) -> None:
    x, weights = problem(5)
    gram = gram_matrix(x)
    trial = [w + 0.01 for w in weights]
    operand = gram.to(torch.float32) if form == "gram" else x
    exact = gram_output_mse(gram, 512, weights, trial)
    low = reduced_output_mse(operand, form, 512, weights, trial)
    assert relative_error(low, exact) < error_estimate(0.0, 128)
    coarse = reduced_output_mse(operand.to(torch.bfloat16), form, 512, weights, trial)
    assert coarse != low  # the product did run in bfloat16
    assert relative_error(coarse, exact) < 4 * EPS_BF16  # D, G and D G each rounded once to bfloat16


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
    exact = [1.0] * 20
    exact[0], exact[3], exact[15] = 0.5, 0.5 * (1 + 1e-3), 0.4
    estimate = list(exact)
    estimate[3], estimate[15] = 0.5, 0.9
    result, _, _, exact_calls, counts = tiered_search(3, exact, estimate)
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


def tiered_search(seed: int, exact: list[float], float32: list[float], coarse: list[float] | None = None):
    """The rescored search on ``problem(seed)`` with per-ratio losses given for each tier (no bfloat16 tier when
    ``coarse`` is None), beside the plain float64 search: ``(result, plain, float32 calls, float64 calls, counts)``."""
    x, weights = problem(seed)
    x_mean, w_mean = search_statistics(x, weights, SPEC)
    estimate_of, float32_calls = counted(by_ratio(x_mean, w_mean, weights, float32))
    loss_of, exact_calls = counted(by_ratio(x_mean, w_mean, weights, exact))
    counts: list = []
    coarse_of = None if coarse is None else by_ratio(x_mean, w_mean, weights, coarse)
    result = best_on_grid_rescored(
        x_mean, w_mean, weights, SPEC, estimate_of, loss_of, counts=counts, coarse_of=coarse_of
    )
    plain = best_on_grid(x_mean, w_mean, weights, SPEC, by_ratio(x_mean, w_mean, weights, exact))
    return result, plain, float32_calls, exact_calls, counts


def test_a_bfloat16_loss_off_by_more_than_its_bound_scores_every_ratio_in_float32() -> None:
    """The bfloat16 best (ratio 0) is exact, so its estimate is the floor; ratio 3 is kept, its float32 loss
    found 1e-2 away: the bfloat16 premise fails, all 20 are scored in float32, and ratio 15 (which bfloat16 put
    far away) wins, as when every ratio is scored in float64."""
    exact = [1.0] * 20
    exact[0], exact[3], exact[15] = 0.5, 0.5 * (1 + 1e-2), 0.4
    coarse = list(exact)
    coarse[3], coarse[15] = 0.5, 0.9
    result, plain, float32_calls, exact_calls, counts = tiered_search(3, exact, exact, coarse)
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss) == (0.75, 0.4)
    assert torch.equal(result.scales, plain.scales)
    assert len(float32_calls) == 20 and counts[0].bfloat16_fell_back and not counts[0].fell_back
    assert counts[0].bfloat16 == 20 and counts[0].bfloat16_estimate == BF16_FLOOR
    assert len(exact_calls) == 2  # the float32 best of the first kept (0), then the float32 best of all (15)


def test_the_bfloat16_tier_narrows_what_float32_scores() -> None:
    """bfloat16 1e-4 off everywhere: its estimate is 64e-4, so ratios 6-8 (within 1.3% of ratio 7) reach
    float32, whose near tie 7/8 reaches float64, where 8 wins."""
    exact = [1.0 + 0.1 * abs(i - 7) for i in range(20)]
    exact[6], exact[8] = 1.01, 1.0 - 1e-9
    float32 = list(exact)
    float32[8] = 1.0 + 1e-7
    coarse = [v * (1 + 1e-4) for v in float32]
    result, plain, float32_calls, exact_calls, counts = tiered_search(7, exact, float32, coarse)
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss) == (0.4, 1.0 - 1e-9)
    assert len(float32_calls) == 3 and len(exact_calls) == 2
    assert counts[0].bfloat16_estimate == pytest.approx(SAFETY * 1e-4)
    assert not counts[0].bfloat16_fell_back and not counts[0].fell_back


def test_the_bfloat16_best_is_measured_against_its_float32_loss() -> None:
    """The bfloat16 tier's error is measured at its best (ratio 5) against the float32 loss the next tier computes
    anyway, not a float64 product: 1.1e-3 off gives an estimate of 0.07, so ratios 5-7 reach float32, whose
    best (6) is clear, and the one float64 product is ratio 6's."""
    exact = [1.0 + 0.1 * abs(i - 6) for i in range(20)]
    exact[5] = 1.001
    coarse = list(exact)
    coarse[5] = 1.0 - 1e-4
    result, plain, float32_calls, exact_calls, counts = tiered_search(2, exact, exact, coarse)
    assert (result.ratio, result.loss) == (plain.ratio, plain.loss) == (0.3, 1.0)
    assert len(float32_calls) == 3 and len(exact_calls) == 1
    assert counts[0].bfloat16_estimate == pytest.approx(SAFETY * (1.001 - (1.0 - 1e-4)) / 1.001)
    assert not counts[0].bfloat16_fell_back and not counts[0].fell_back


def test_a_non_finite_float32_estimate_scores_every_ratio_in_float64() -> None:
    exact = [1.0 + 0.1 * abs(i - 4) for i in range(20)]
    exact[17] = 0.5
    estimate = list(exact)
    estimate[17] = math.nan
    result, _, _, exact_calls, counts = tiered_search(8, exact, estimate)
    assert (result.ratio, result.loss) == (0.85, 0.5)
    assert len(exact_calls) == 20 and counts[0].fell_back


def test_bfloat16_premise_through_the_float32_loss() -> None:
    assert bfloat16_premise_holds(1.001, 1.0, None, 2e-3, 1e-6)
    assert not bfloat16_premise_holds(1.003, 1.0, None, 2e-3, 1e-6)
    assert not bfloat16_premise_holds(1.0015, 1.0, None, 2e-3, 1e-3)  # the float32 error counts too
    assert bfloat16_premise_holds(1.0015, 1.0, 1.0, 2e-3, 1e-3)  # the float64 loss, where known, decides
    assert bfloat16_error_estimate(0.0) == BF16_FLOOR
    assert bfloat16_error_estimate(1e-4) == pytest.approx(SAFETY * 1e-4)


def test_reduced_operands_hold_one_copy_at_a_time() -> None:
    gram = gram_matrix(problem(9)[0])
    operands = ReducedOperands(gram, "gram")
    low = operands.get(torch.bfloat16)
    assert low.dtype == torch.bfloat16 and operands.get(torch.bfloat16) is low
    single = operands.get(torch.float32)
    assert operands.copy is single and torch.equal(single.to(torch.float64), gram)  # float32 values exactly
    assert torch.equal(single.to(torch.bfloat16), low)  # the same rounding as from the float64 matrix
    operands.release()
    assert operands.copy is None
    assert isinstance(native_bfloat16(), bool)


def test_error_estimate_and_relative_error() -> None:
    assert error_estimate(0.0, 14336) == pytest.approx(math.sqrt(14336) * EPS32)
    assert error_estimate(1e-6, 128) == pytest.approx(SAFETY * 1e-6)
    assert relative_error(1.0, 1.0) == 0.0
    assert relative_error(0.0, 0.0) == 0.0
    assert relative_error(1e-3, 0.0) == math.inf
    assert relative_error(math.nan, 1.0) == math.inf
    assert relative_error(1.01, 1.0) == pytest.approx(0.01)


@pytest.mark.parametrize(("rescore", "bfloat16"), [(True, True), (True, False), (False, False)])
def test_one_or_two_threads_give_the_same_bits(rescore: bool, bfloat16: bool) -> None:
    """Large enough for the GEMMs and the elementwise passes to split across threads. The chosen ratio and its
    scales (what reaches the checkpoint) are the same bits; the float64 loss is the same up to the order of its
    sum, which ATen splits by thread (on main as well)."""
    x, weights = problem(6, tokens=2048, width=512)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(search_scales_gram(x, weights, SPEC, rescore=rescore, bfloat16=bfloat16))
            results.append(search_scales_gram(x, weights, SPEC, rescore=rescore, bfloat16=bfloat16))
    finally:
        torch.set_num_threads(before)
    one, again, two = results[0], results[1], results[2]
    assert (one.ratio, one.loss) == (again.ratio, again.loss) and torch.equal(one.scales, again.scales)
    assert one.ratio == two.ratio
    assert torch.equal(one.scales, two.scales)
    assert one.loss == pytest.approx(two.loss, rel=1e-12)


def test_the_automatic_bfloat16_tier_skips_narrow_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``bfloat16=None`` a narrow search (``in`` below BFLOAT16_MIN_WIDTH) never scores in bfloat16, even on
    a CPU with native bfloat16; the same search with ``bfloat16=True`` does."""
    from qalgos import awq_gram

    monkeypatch.setattr(awq_gram, "native_bfloat16", lambda: True)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 64, 96, generator=g)
    weights = [torch.randn(32, 96, generator=g)]
    automatic: list = []
    forced: list = []
    awq_gram.search_scales_gram(x, weights, SPEC, counts=automatic)
    awq_gram.search_scales_gram(x, weights, SPEC, counts=forced, bfloat16=True)
    assert automatic[-1].bfloat16 == 0
    assert forced[-1].bfloat16 > 0
