"""AWQ's Gram-form scale search: the same loss as scoring the linears' outputs, the same chosen ratio."""

import pytest
import torch
from qalgos.awq import search_scales
from qalgos.awq_gram import gram_matrix, gram_output_mse, search_scales_gram
from qalgos.errors import ShapeError
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, sym=False)


def outlier_inputs(seed: int, tokens: int = 512, width: int = 128) -> torch.Tensor:
    """``[tokens, width]`` activations with a few channels 20x larger (where AWQ's scaling matters)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, width, generator=gen)
    x[:, torch.randperm(width, generator=gen)[:4]] *= 20.0
    return x


def output_forward(x: torch.Tensor):
    """``forward_with`` for self-inspected linears: their concatenated outputs on ``x``."""
    return lambda weights: torch.cat([x @ w.to(torch.float32).T for w in weights], dim=-1)


def test_gram_loss_equals_the_output_mse() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 64, generator=gen, dtype=torch.float64)
    weights = [torch.randn(48, 64, generator=gen, dtype=torch.float64), torch.randn(16, 64, generator=gen)]
    trial = [w + 0.01 * torch.randn(w.shape, generator=gen, dtype=w.dtype) for w in weights]
    direct = torch.cat([x @ (w.double() - t.double()).T for w, t in zip(weights, trial, strict=True)], dim=1)
    expected = float(direct.square().mean())
    gram = (x.T @ x).to(torch.float64)
    assert gram_output_mse(gram, 300, weights, trial) == pytest.approx(expected, rel=1e-10)


def test_gram_matrix_is_float64_over_every_token() -> None:
    x = torch.randn(2, 5, 8)
    gram = gram_matrix(x)
    flat = x.reshape(10, 8).double()
    assert gram.dtype == torch.float64 and gram.shape == (8, 8)
    torch.testing.assert_close(gram, flat.T @ flat, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_gram_search_chooses_the_output_searchs_ratio(seed: int) -> None:
    x = outlier_inputs(seed)
    gen = torch.Generator().manual_seed(100 + seed)
    weights = [torch.randn(96, 128, generator=gen) * 0.05, torch.randn(32, 128, generator=gen) * 0.05]
    gram = search_scales_gram(x, weights, SPEC)
    full = search_scales(x, weights, output_forward(x), SPEC)
    assert gram.ratio == full.ratio
    assert torch.equal(gram.scales, full.scales)
    assert gram.loss == pytest.approx(full.loss, rel=1e-5)


def test_gram_search_checks_shapes_like_the_output_search() -> None:
    x = torch.randn(10, 64)
    with pytest.raises(ShapeError, match=r"weights\[1\]: expected \[out, 64\]"):
        search_scales_gram(x, [torch.randn(8, 64), torch.randn(8, 32)], SPEC)
    with pytest.raises(ShapeError, match=r"x: expected \[\.\.\., 32\]"):
        search_scales_gram(x, [torch.randn(8, 32)], SPEC)


def test_gram_matrix_is_one_product_when_narrow_and_mirrored_blocks_when_wide() -> None:
    """Under 2048 inputs the one float32 product ``xᵀx``, bit for bit; wider, the products of its lower-triangle
    blocks mirrored: exactly symmetric and within float32 rounding of the full product."""
    gen = torch.Generator().manual_seed(4)
    narrow = torch.randn(3, 100, 576, generator=gen)
    flat = narrow.reshape(300, 576)
    assert torch.equal(gram_matrix(narrow), (flat.T @ flat).to(torch.float64))
    wide = torch.randn(600, 2100, generator=gen)
    gram = gram_matrix(wide)
    assert torch.equal(gram, gram.T)
    torch.testing.assert_close(gram, wide.double().T @ wide.double(), rtol=1e-5, atol=1e-3)
