"""RTN: group-wise rounding with the GPTQ formulas, partial groups, logical weight consistency."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.errors import ShapeError
from qalgos.group_params import codes_of, gptq_params
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("sym", [True, False])
def test_rtn_matches_the_formula_per_group(weight: torch.Tensor, bits: int, sym: bool) -> None:
    spec = QuantSpec(bits=bits, group_size=40, sym=sym)  # 96 columns: groups of 40, 40, 16
    result = quantize_rtn(weight, spec)
    qw = result.weight
    assert qw.scales.shape == (3, 48) and qw.scales.dtype == np.float32
    assert qw.zeros.dtype == np.int32 and qw.codes.dtype == np.uint8
    assert qw.g_idx.tolist() == [i // 40 for i in range(96)]
    last = weight[:, 80:]
    scale, zero = gptq_params(last, spec)
    np.testing.assert_array_equal(qw.scales[2], scale.numpy())
    np.testing.assert_array_equal(qw.codes[:, 80:], codes_of(last, scale[:, None], zero[:, None], spec.maxq).numpy())
    assert torch.equal(torch.from_numpy(qw.dequantize()), result.dequantized)
    if sym:
        assert bool((qw.zeros == 1 << (bits - 1)).all())


def test_rtn_keeps_input_dtype_and_records_fallback(weight: torch.Tensor) -> None:
    result = quantize_rtn(weight.to(torch.bfloat16), QuantSpec(bits=4, group_size=-1), fallback="why")
    assert result.dequantized.dtype == torch.bfloat16
    assert result.fallback == "why" and result.weight.meta["fallback"] == "why"
    assert result.weight.scales.shape == (1, 48)


def test_rtn_error_shrinks_with_bits(weight: torch.Tensor) -> None:
    losses = [quantize_rtn(weight, QuantSpec(bits=b, group_size=32)).loss for b in (2, 3, 4, 8)]
    assert losses == sorted(losses, reverse=True)


def test_float16_scale_dtype_dequantizes_as_stored(weight: torch.Tensor) -> None:
    result = quantize_rtn(weight, QuantSpec(bits=4, group_size=32, scale_dtype="float16"))
    assert result.weight.scales.dtype == np.float16
    assert torch.equal(torch.from_numpy(result.weight.dequantize()), result.dequantized)


def test_float16_storage_keeps_the_float32_code_choice(weight: torch.Tensor) -> None:
    wide = quantize_rtn(weight, QuantSpec(bits=4, group_size=32))
    narrow = quantize_rtn(weight, QuantSpec(bits=4, group_size=32, scale_dtype="float16"))
    np.testing.assert_array_equal(narrow.weight.codes, wide.weight.codes)
    np.testing.assert_array_equal(narrow.weight.scales, wide.weight.scales.astype(np.float16))


@pytest.mark.parametrize(
    "bad", [torch.zeros(4), torch.zeros(2, 3, dtype=torch.int32), torch.full((2, 2), float("nan"))]
)
def test_rtn_rejects_bad_weights(bad: torch.Tensor) -> None:
    with pytest.raises(ShapeError, match="weight"):
        quantize_rtn(bad, QuantSpec(bits=4))
