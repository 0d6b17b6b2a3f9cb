"""The GPTQ and AWQ parameter formulas, checked against hand-computed values."""

from __future__ import annotations

import torch
from qalgos.group_params import awq_params, codes_of, dequant_of, gptq_params
from qalgos.spec import QuantSpec


def test_gptq_symmetric_uses_twice_absmax_and_mid_zero() -> None:
    # The reference only mirrors the range when the row has a negative value; a non-negative row keeps
    # [0, max] (scale = max / maxq) while its zero point stays at the middle code.
    x = torch.tensor([[-3.0, 1.0, 2.0], [0.5, 1.5, 0.25]])
    scale, zero = gptq_params(x, QuantSpec(bits=4, sym=True))
    torch.testing.assert_close(scale, torch.tensor([6.0 / 15, 1.5 / 15]), rtol=0, atol=0)
    assert zero.tolist() == [8.0, 8.0]


def test_gptq_asymmetric_range_includes_zero() -> None:
    x = torch.tensor([[1.0, 2.0, 4.0], [-4.0, -2.0, -1.0]])
    scale, zero = gptq_params(x, QuantSpec(bits=4, sym=False))
    torch.testing.assert_close(scale, torch.tensor([4.0 / 15, 4.0 / 15]), rtol=0, atol=0)
    assert zero.tolist() == [0.0, 15.0]


def test_all_zero_row_gets_unit_range() -> None:
    x = torch.zeros(1, 8)
    scale, zero = gptq_params(x, QuantSpec(bits=4, sym=False))
    torch.testing.assert_close(scale, torch.tensor([2.0 / 15]))
    assert zero.tolist() == [float(torch.round(torch.tensor(1.0) / torch.tensor(2.0 / 15)))]
    codes = codes_of(x, scale[:, None], zero[:, None], 15)
    assert bool((dequant_of(codes, scale[:, None], zero[:, None]) == 0).all())


def test_awq_formulas_differ_from_gptq() -> None:
    x = torch.tensor([[-3.0, 1.0, 2.0]])
    scale, zero = awq_params(x, QuantSpec(bits=4, sym=True))
    torch.testing.assert_close(scale, torch.tensor([3.0 / 7]))
    assert zero.tolist() == [8.0]
    x = torch.tensor([[1.0, 2.0, 4.0]])
    scale, zero = awq_params(x, QuantSpec(bits=4, sym=False))
    torch.testing.assert_close(scale, torch.tensor([3.0 / 15]))
    assert zero.tolist() == [0.0]  # -round(1 / 0.2) = -5 clamped to 0: AWQ does not force 0 into the range


def test_codes_clamp_and_round_half_even() -> None:
    x = torch.tensor([[0.5, 1.5, 100.0, -100.0]])
    codes = codes_of(x, torch.tensor([[1.0]]), torch.tensor([[2.0]]), 7)
    assert codes.tolist() == [[2.0, 4.0, 7.0, 0.0]]


def test_mse_search_never_worse_than_plain_range() -> None:
    gen = torch.Generator().manual_seed(3)
    u = torch.rand(32, 128, generator=gen) - 0.5
    x = -torch.sign(u) * torch.log1p(-2 * u.abs())  # Laplace samples: heavy tails make shrinking pay off
    x = x * torch.rand(32, 1, generator=gen)
    for sym in (True, False):
        plain = QuantSpec(bits=3, sym=sym)
        searched = QuantSpec(bits=3, sym=sym, mse=2.0)
        errs = []
        for spec in (plain, searched):
            s, z = gptq_params(x, spec)
            q = dequant_of(codes_of(x, s[:, None], z[:, None], spec.maxq), s[:, None], z[:, None])
            errs.append(((q - x) ** 2).sum(dim=1))
        assert bool((errs[1] <= errs[0]).all())
        assert float(errs[1].sum()) < 0.97 * float(errs[0].sum())


def test_float16_storage_does_not_round_the_solving_scales() -> None:
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(1))
    scale16, _ = gptq_params(x, QuantSpec(bits=4, scale_dtype="float16"))
    scale32, _ = gptq_params(x, QuantSpec(bits=4))
    assert torch.equal(scale16, scale32)
    assert not torch.equal(scale16, scale16.to(torch.float16).to(torch.float32))


def test_float16_storage_clamps_tiny_scales_into_float16_range() -> None:
    x = torch.zeros(2, 8)
    x[0, 0] = 1e-9
    scale, _ = gptq_params(x, QuantSpec(bits=4, scale_dtype="float16"))
    assert bool((scale >= torch.finfo(torch.float16).tiny).all())
