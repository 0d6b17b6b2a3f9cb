"""The AWQ Gram search's float32 tier through the Gram matrix's Cholesky factor: the same loss, the same choice."""

import pytest
import torch
from qalgos import awq_gram, hessian_inverse
from qalgos.awq_gram import (
    ReducedOperands,
    factor_output_mse,
    factor_pays,
    gram_matrix,
    gram_output_mse,
    search_scales_gram,
)
from qalgos.awq_rescored_grid import error_estimate, relative_error
from qalgos.hessian_inverse import cholesky_in_place, cholesky_with_inverse
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, sym=False)


def problem(seed: int, tokens: int = 512, width: int = 128):
    """Outlier-heavy inputs ``[tokens, width]`` and two weights reading them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, width, generator=gen)
    x[:, torch.randperm(width, generator=gen)[:4]] *= 20.0
    weights = [torch.randn(96, width, generator=gen) * 0.05, torch.randn(32, width, generator=gen) * 0.05]
    return x, weights


def spd(n: int, seed: int) -> torch.Tensor:
    x = torch.randn(2 * n, n, generator=torch.Generator().manual_seed(seed))
    return x.T @ x


@pytest.mark.parametrize(("n", "leaf"), [(50, 1024), (200, 64), (130, 32)])
def test_cholesky_in_place_is_the_blocked_factor(n: int, leaf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same factor, bit for bit, as :func:`cholesky_with_inverse`'s (one loop), zero above the diagonal."""
    monkeypatch.setattr(hessian_inverse, "LEAF", leaf)
    a = spd(n, n)
    factors = cholesky_with_inverse(a)
    assert factors is not None and factors[0] is not None
    work = a.clone()
    assert cholesky_in_place(work)
    assert torch.equal(work, factors[0])
    assert torch.equal(work, work.tril())
    torch.testing.assert_close(work @ work.T, a, rtol=1e-4, atol=1e-3)


def test_cholesky_in_place_refuses_a_matrix_that_is_not_positive_definite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hessian_inverse, "LEAF", 16)
    a = spd(40, 3)
    a[30, :] = 0.0
    a[:, 30] = 0.0  # a dead input: a zero pivot in the third block
    assert not cholesky_in_place(a)


@pytest.mark.parametrize("leaf", [1024, 48])
def test_factor_loss_equals_the_gram_loss(leaf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``‖D L‖²`` block column by block column (three blocks at ``leaf`` 48) is ``tr(D G Dᵀ)`` to float32 rounding."""
    monkeypatch.setattr(hessian_inverse, "LEAF", leaf)
    monkeypatch.setattr(awq_gram, "LEAF", leaf)
    x, weights = problem(5)
    gram = gram_matrix(x)
    factor = gram.to(torch.float32)
    assert cholesky_in_place(factor)
    trial = [w + 0.01 * torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) for w in weights]
    exact = gram_output_mse(gram, 512, weights, trial)
    through_factor = factor_output_mse(factor, 512, weights, trial)
    assert relative_error(through_factor, exact) < error_estimate(0.0, 128)


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls of :func:`factor_output_mse` the search makes."""
    calls: list[int] = []
    original = awq_gram.factor_output_mse

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(awq_gram, "factor_output_mse", counted)
    return calls


@pytest.mark.parametrize("bfloat16", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_the_float32_tier_through_the_factor_gives_the_float64_searchs_bits(
    seed: int, bfloat16: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hessian_inverse, "LEAF", 48)
    monkeypatch.setattr(awq_gram, "LEAF", 48)
    x, weights = problem(seed)
    exact = search_scales_gram(x, weights, SPEC, rescore=False)
    calls = counting(monkeypatch)
    counts: list = []
    found = search_scales_gram(x, weights, SPEC, counts=counts, bfloat16=bfloat16)
    assert (found.ratio, found.loss) == (exact.ratio, exact.loss)
    assert torch.equal(found.scales, exact.scales)
    assert len(calls) == counts[0].float32 > 0 and not counts[0].fell_back
    calls.clear()
    through_gram = search_scales_gram(x, weights, SPEC, bfloat16=bfloat16, factor=False)
    assert not calls and (through_gram.ratio, through_gram.loss) == (exact.ratio, exact.loss)


def test_a_gram_matrix_with_a_dead_input_is_scored_through_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero input column makes the Gram matrix singular: the factorisation fails once, every float32 loss goes
    through the Gram matrix, and the choice is still the float64 search's."""
    x, weights = problem(7)
    x[:, 17] = 0.0
    exact = search_scales_gram(x, weights, SPEC, rescore=False)
    calls = counting(monkeypatch)
    counts: list = []
    found = search_scales_gram(x, weights, SPEC, counts=counts, bfloat16=False)
    assert not calls and counts[0].float32 == 20
    assert (found.ratio, found.loss) == (exact.ratio, exact.loss) and torch.equal(found.scales, exact.scales)


def test_the_factor_is_made_only_when_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer output rows over all the ratios scored than half of ``in`` do not pay for the factorisation: 20 ratios
    of a 2-row linear over 128 inputs (``40 < 64``) are scored through the Gram matrix."""
    assert factor_pays(20, 128, 128) and factor_pays(1, 64, 128)
    assert not factor_pays(1, 8, 128) and not factor_pays(7, 8, 128) and factor_pays(8, 8, 128)
    x, _ = problem(8)
    weights = [torch.randn(2, 128, generator=torch.Generator().manual_seed(2)) * 0.05]
    calls = counting(monkeypatch)
    counts: list = []
    search_scales_gram(x, weights, SPEC, counts=counts, bfloat16=False)
    assert counts[0].float32 == 20 and not calls


def test_reduced_operands_keep_the_factor_as_their_one_copy() -> None:
    gram = gram_matrix(problem(9)[0])
    operands = ReducedOperands(gram, "gram")
    low = operands.get(torch.bfloat16)
    factor = operands.factor()
    assert factor is not None and operands.copy is factor and operands.factor() is factor
    assert low is not factor and factor.dtype == torch.float32 and torch.equal(factor, factor.tril())
    single = operands.get(torch.float32)
    assert single is not factor and torch.equal(single.to(torch.float64), gram)  # the Gram matrix again
    assert ReducedOperands(problem(9)[0], "rows").factor() is None
