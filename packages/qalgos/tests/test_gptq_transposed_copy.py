"""qalgos.gptq.transposed_in_order: the solve's float32 ``Wt`` in visiting order, dead columns zeroed, never
the caller's tensor; and stored_dequantized's broadcast path for runs of consecutive columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.column_order import plan_columns
from qalgos.gptq import transposed_in_order
from qalgos.result import _run_width, stored_dequantized
from qalgos.spec import QuantSpec
from qformats.logical import QuantizedWeight, default_g_idx


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("order", ["natural", "group_aware", "desc_act"])
def test_rows_are_the_visited_columns_widened_with_dead_ones_zeroed(dtype: torch.dtype, order: str) -> None:
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(24, 64, generator=g).to(dtype)
    before = weight.clone()
    spec = QuantSpec(bits=4, group_size=16, act_group_aware=order == "group_aware", desc_act=order == "desc_act")
    plan = plan_columns(torch.rand(64, generator=g) + 0.1, spec)
    assert plan.is_identity() == (order == "natural")
    dead = torch.zeros(64, dtype=torch.bool)
    dead[[3, 40]] = True
    wt = transposed_in_order(weight, plan, dead)
    expected = weight.to(torch.float32, copy=True)
    expected[:, dead] = 0.0
    expected = expected[:, plan.perm].T
    assert wt.dtype == torch.float32 and wt.is_contiguous() and tuple(wt.shape) == (64, 24)
    assert torch.equal(wt, expected)
    assert torch.equal(weight, before)  # the caller's weight is never written


def test_a_single_row_weight_is_copied_not_viewed() -> None:
    """``[1, in].T`` is already contiguous; the solve must still get its own tensor."""
    weight = torch.randn(1, 32)
    spec = QuantSpec(bits=4, group_size=16)
    plan = plan_columns(torch.ones(32), spec)
    wt = transposed_in_order(weight, plan, torch.zeros(32, dtype=torch.bool))
    wt.add_(1.0)
    assert not torch.equal(wt.T, weight)


def test_run_width_recognises_only_runs_of_consecutive_columns() -> None:
    natural = torch.from_numpy(default_g_idx(256, 64).astype(np.int64))
    assert _run_width(natural, 4) == 64
    assert _run_width(torch.zeros(130, dtype=torch.int64), 1) == 130  # one group of every column
    partial = torch.from_numpy(default_g_idx(200, 64).astype(np.int64))  # 64, 64, 64, 8
    assert _run_width(partial, 4) == 0
    assert _run_width(natural[torch.randperm(256)], 4) == 0


def test_both_paths_equal_the_numpy_formula_for_a_transposed_code_view() -> None:
    """GPTQ's codes arrive as a transposed view of its ``[in, out]`` solve; both the broadcast and the gather
    path give the numpy formula's bits, in float32 and bfloat16."""
    rng = np.random.default_rng(5)
    codes_t = rng.integers(0, 16, (256, 40), dtype=np.uint8)
    for g_idx in (default_g_idx(256, 32), default_g_idx(256, 32)[rng.permutation(256)]):
        weight = QuantizedWeight(
            codes=codes_t.T,
            scales=(rng.random((8, 40)) * 0.02 + 1e-4).astype(np.float16),
            zeros=rng.integers(0, 16, (8, 40), dtype=np.int32),
            g_idx=np.ascontiguousarray(g_idx, dtype=np.int32),
            bits=4,
            group_size=32,
            sym=False,
        )
        expected = weight.dequantize()
        got = stored_dequantized(weight, torch.empty(0))
        np.testing.assert_array_equal(got.numpy().view(np.int32), expected.view(np.int32))
        half = stored_dequantized(weight, torch.empty(0, dtype=torch.bfloat16))
        assert torch.equal(half.view(torch.int16), torch.from_numpy(expected).to(torch.bfloat16).view(torch.int16))
