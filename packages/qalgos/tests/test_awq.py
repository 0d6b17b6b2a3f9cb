"""AWQ: scale search beats RTN on outlier activations; folding preserves the function; clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import correlated_activations, outlier_activations, output_error
from qalgos.awq import (
    _output_mse,
    fake_quantize_awq,
    fold_scales_into_previous,
    quantize_awq,
    quantize_scaled_group,
    scale_consumer_weight,
    search_scales,
)
from qalgos.awq_clip import apply_clip, clip_allowed, search_clip
from qalgos.errors import NumericalError, ShapeError, SpecError
from qalgos.group_params import awq_params
from qalgos.rtn import quantize_groups
from qalgos.spec import QuantSpec


def linear_forward(x: torch.Tensor):
    return lambda ws: x @ ws[0].T


def test_awq_beats_rtn_when_few_channels_carry_large_activations() -> None:
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    x, _ = outlier_activations(512, 128, outliers=4, gain=30.0)
    spec = QuantSpec(bits=3, group_size=32)
    search = search_scales(x, [w], linear_forward(x), spec)
    assert search.scales.shape == (128,) and search.ratio > 0
    scaled = quantize_awq(scale_consumer_weight(w, search.scales), spec)
    effective = scaled.dequantized / search.scales[None, :]
    rtn = quantize_awq(w, spec).dequantized
    assert output_error(x, w, effective) < 0.8 * output_error(x, w, rtn)
    assert search.loss == pytest.approx(output_error(x, w, effective) / 64, rel=1e-4)


def test_scaled_group_folds_into_a_norm_without_changing_the_function() -> None:
    gen = torch.Generator().manual_seed(1)
    hidden, _ = outlier_activations(256, 96, outliers=3, gain=25.0)
    gamma = torch.rand(96, generator=gen) + 0.5
    x = hidden * gamma
    weights = [torch.randn(32, 96, generator=gen), torch.randn(48, 96, generator=gen)]

    def forward(ws):
        return torch.cat([x @ wj.T for wj in ws], dim=1)

    spec = QuantSpec(bits=4, group_size=32, sym=False)
    group = quantize_scaled_group(x, weights, ["self_attn.q_proj", "self_attn.v_proj"], forward, spec)
    assert group.clipped == [False, True]
    new_gamma, _ = fold_scales_into_previous(gamma, None, group.search.scales)
    folded_x = hidden * new_gamma
    for w, scaled in zip(weights, group.scaled_weights, strict=True):
        torch.testing.assert_close(folded_x @ scaled.T, x @ w.T, rtol=1e-4, atol=1e-3)
    quantized = torch.cat([folded_x @ r.dequantized.T for r in group.results], dim=1)
    plain = torch.cat([x @ quantize_awq(w, spec).dequantized.T for w in weights], dim=1)
    reference = forward(weights)
    assert (quantized - reference).square().mean() < (plain - reference).square().mean()


def test_fold_into_previous_linear_divides_trailing_rows_and_bias() -> None:
    prev = torch.ones(10, 4)
    bias = torch.ones(10)
    scales = torch.tensor([2.0, 4.0])
    new_w, new_b = fold_scales_into_previous(prev, bias, scales)
    assert new_w[:8].eq(1).all() and new_w[8].eq(0.5).all() and new_w[9].eq(0.25).all()
    assert new_b.tolist() == [1.0] * 8 + [0.5, 0.25]
    assert prev.eq(1).all()  # inputs are not mutated
    with pytest.raises(ShapeError, match="weight"):
        fold_scales_into_previous(torch.ones(1), None, scales)


def test_quantize_awq_symmetric_zero_points_and_consistency() -> None:
    w = torch.randn(16, 70, generator=torch.Generator().manual_seed(2))
    result = quantize_awq(w, QuantSpec(bits=4, group_size=32, sym=True))
    assert bool((result.weight.zeros == 8).all())
    assert result.weight.scales.shape == (3, 16)
    np.testing.assert_array_equal(result.weight.dequantize(), result.dequantized.numpy())
    # AWQ symmetric scale is absmax / 7 for 4 bits
    torch.testing.assert_close(
        torch.from_numpy(result.weight.scales[0]), w[:, :32].abs().amax(dim=1) / 7, rtol=1e-6, atol=0
    )


def test_clip_search_bounds_and_partial_groups() -> None:
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 100, generator=gen)
    w[torch.rand(64, 100, generator=gen) < 0.02] *= 8  # rare large weights make clipping worthwhile
    x = correlated_activations(600, 100)
    spec = QuantSpec(bits=3, group_size=32)
    clip = search_clip(w, x, spec)
    assert clip.shape == (64, 4)
    absmax = apply_clip(w, torch.full((64, 4), float("inf")), spec).abs()
    group_max = torch.stack([absmax[:, i * 32 : (i + 1) * 32].amax(dim=1) for i in range(4)], dim=1)
    assert bool((clip <= group_max).all()) and bool((clip >= 0.55 * group_max - 1e-6).all())
    assert bool((clip < group_max).any())
    clipped = quantize_awq(w, spec, clip).dequantized
    assert output_error(x, w, clipped) < output_error(x, w, quantize_awq(w, spec).dequantized)


def test_clip_names() -> None:
    assert not clip_allowed("model.layers.0.self_attn.q_proj")
    assert not clip_allowed("transformer.h.0.attn.Wqkv")
    assert clip_allowed("model.layers.0.mlp.down_proj")


def test_awq_errors_are_named() -> None:
    w = torch.randn(8, 32)
    x = torch.randn(20, 32)
    with pytest.raises(SpecError, match="desc_act"):
        quantize_awq(w, QuantSpec(bits=4, group_size=16, desc_act=True))
    with pytest.raises(NumericalError, match="NaN"):
        search_scales(x, [w], lambda ws: torch.full((20, 8), float("nan")), QuantSpec(bits=4, group_size=16))
    with pytest.raises(ShapeError, match="forward_with"):
        search_scales(x, [w], lambda ws: torch.zeros(3), QuantSpec(bits=4, group_size=16), reference=x @ w.T)
    with pytest.raises(ShapeError, match="clip"):
        quantize_awq(w, QuantSpec(bits=4, group_size=16), clip=torch.ones(8, 3))


@pytest.mark.parametrize("sym", [False, True])
@pytest.mark.parametrize("in_features", [128, 96, 100])
def test_fake_quantize_equals_the_per_group_loop_bit_for_bit(sym: bool, in_features: int) -> None:
    w = torch.randn(48, in_features, generator=torch.Generator().manual_seed(3)) * 0.05
    w[:, 5] *= 40.0
    spec = QuantSpec(bits=4, group_size=32, sym=sym)
    assert torch.equal(fake_quantize_awq(w, spec), quantize_groups(w, spec, awq_params)[3])


def test_output_mse_equals_the_plain_float64_expression() -> None:
    gen = torch.Generator().manual_seed(4)
    reference, output = torch.randn(300, 70, generator=gen), torch.randn(300, 70, generator=gen)
    plain = float((reference.to(torch.float64) - output.to(torch.float64)).square().mean())
    before = output.clone()
    assert _output_mse(reference.to(torch.float64), output) == plain
    assert torch.equal(output, before)  # the in-place work happens on a float64 copy
    with pytest.raises(ShapeError, match="forward_with"):
        _output_mse(reference.to(torch.float64), output[:10])
