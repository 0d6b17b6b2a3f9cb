"""qalgos.result.stored_dequantized: torch's blocks give qformats' numpy dequantization bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos import result as result_module
from qalgos.result import stored_dequantized
from qformats.logical import QuantizedWeight, default_g_idx


def _weight(out: int, in_: int, group_size: int, *, permuted: bool, sym: bool, scale_dtype: type) -> QuantizedWeight:
    rng = np.random.default_rng(out * 1000 + in_ + group_size)
    groups = 1 if group_size == -1 else -(-in_ // group_size)
    g_idx = default_g_idx(in_, group_size)
    if permuted:  # act-order: the same group sizes, columns in another order
        g_idx = g_idx[rng.permutation(in_)]
    zeros = np.full((groups, out), 8, np.int32) if sym else rng.integers(0, 16, (groups, out), dtype=np.int32)
    return QuantizedWeight(
        codes=rng.integers(0, 16, (out, in_), dtype=np.uint8),
        scales=(rng.random((groups, out)) * 0.03 + 1e-4).astype(scale_dtype),
        zeros=zeros,
        g_idx=np.ascontiguousarray(g_idx, dtype=np.int32),
        bits=4,
        group_size=group_size,
        sym=sym,
    )


@pytest.mark.parametrize(
    ("out", "in_", "group_size", "permuted", "sym", "scale_dtype"),
    [
        (96, 256, 128, False, True, np.float16),
        (96, 200, 64, False, False, np.float32),  # partial last group, asymmetric zeros
        (64, 256, 32, True, False, np.float16),  # act-order g_idx
        (33, 130, -1, False, True, np.float32),  # one group of every column
    ],
)
def test_equals_the_numpy_formula_bit_for_bit(
    out: int, in_: int, group_size: int, permuted: bool, sym: bool, scale_dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    weight = _weight(out, in_, group_size, permuted=permuted, sym=sym, scale_dtype=scale_dtype)
    expected = weight.dequantize()
    whole = stored_dequantized(weight, torch.empty(0))
    monkeypatch.setattr(result_module, "DEQUANTIZE_BLOCK_ELEMENTS", 7 * in_ + 3)  # uneven row blocks
    blocked = stored_dequantized(weight, torch.empty(0))
    for got in (whole, blocked):
        assert got.dtype == torch.float32 and tuple(got.shape) == (out, in_)
        np.testing.assert_array_equal(got.numpy().view(np.int32), expected.view(np.int32))


def test_takes_the_dtype_of_like() -> None:
    weight = _weight(48, 128, 64, permuted=False, sym=True, scale_dtype=np.float16)
    got = stored_dequantized(weight, torch.empty(0, dtype=torch.bfloat16))
    assert got.dtype == torch.bfloat16
    assert torch.equal(
        got.view(torch.int16), torch.from_numpy(weight.dequantize()).to(torch.bfloat16).view(torch.int16)
    )
