"""Folding AWQ scales into a previous linear that is already quantized: the stored output rows are divided, which
is that linear quantized after the fold (GPTQ, with and without its range search, and RTN)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import correlated_activations, run_gptq
from qalgos.awq import fold_scales_into_quantized
from qalgos.errors import ShapeError
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec


@pytest.mark.parametrize(
    "spec",
    [
        QuantSpec(bits=4, group_size=32, sym=True, act_group_aware=True, scale_dtype="float16"),
        QuantSpec(bits=4, group_size=32, sym=False, mse=2.0),
        QuantSpec(bits=3, group_size=-1, sym=True, desc_act=True),
    ],
)
def test_folding_equals_solving_the_folded_weight(spec: QuantSpec) -> None:
    gen = torch.Generator().manual_seed(7)
    x = correlated_activations(512, 96, seed=7)
    weight = torch.randn(40, 96, generator=gen)
    scales = torch.rand(24, generator=gen) * 3 + 0.25  # the last 24 output rows feed the scaled group
    folded = fold_scales_into_quantized(run_gptq(weight, x, spec), scales)
    after = weight.clone()
    after[-24:] /= scales[:, None]
    direct = run_gptq(after, x, spec)
    assert folded.weight.scales.dtype == direct.weight.scales.dtype
    # a weight on a rounding tie may take the neighbouring code, and its row's later columns then follow the
    # other error path: at most a couple of the 24 scaled rows, never an unscaled one
    rows = np.nonzero((folded.weight.codes != direct.weight.codes).any(axis=1))[0]
    assert len(rows) <= 2 and all(row >= 16 for row in rows), rows
    np.testing.assert_array_equal(folded.weight.zeros, direct.weight.zeros)
    np.testing.assert_array_equal(folded.weight.g_idx, direct.weight.g_idx)
    np.testing.assert_array_equal(folded.weight.dequantize(), folded.dequantized.numpy())
    rtol = 2e-3 if spec.scale_dtype == "float16" else 1e-5  # float16 scales are rounded twice when folded
    same_rows = [row for row in range(40) if row not in set(rows)]
    np.testing.assert_allclose(
        folded.dequantized.numpy()[same_rows], direct.dequantized.numpy()[same_rows], rtol=rtol, atol=1e-6
    )


def test_rtn_and_the_untouched_rows() -> None:
    weight = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    spec = QuantSpec(bits=4, group_size=32)
    base = quantize_rtn(weight, spec)
    folded = fold_scales_into_quantized(base, torch.tensor([2.0, 4.0]))
    np.testing.assert_array_equal(folded.weight.codes, base.weight.codes)
    np.testing.assert_array_equal(folded.weight.scales[:, :6], base.weight.scales[:, :6])
    np.testing.assert_allclose(folded.weight.scales[:, 6:], base.weight.scales[:, 6:] / [2.0, 4.0], rtol=1e-7)
    torch.testing.assert_close(folded.dequantized[6:], base.dequantized[6:] / torch.tensor([[2.0], [4.0]]))
    assert folded.loss == base.loss and folded.fallback == base.fallback
    with pytest.raises(ShapeError, match=r"scales: expected \[n\] with 1 <= n <= 8"):
        fold_scales_into_quantized(base, torch.ones(9))
