"""all_finite: the answer of torch.isfinite(t).all(), chunk by chunk."""

from __future__ import annotations

import pytest
import torch
from qalgos.finite_check import all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [0, 5, -1])
def test_all_finite_agrees_with_isfinite_across_chunks(
    dtype: torch.dtype, bad: float | None, where: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qalgos.finite_check as fc

    monkeypatch.setattr(fc, "FINITE_CHUNK", 7)  # many chunks, the last one partial
    t = torch.randn(9, 11, generator=torch.Generator().manual_seed(3)).to(dtype)
    if bad is not None:
        t.view(-1)[where] = bad
    assert all_finite(t) == bool(torch.isfinite(t).all()) == (bad is None)
    assert all_finite(t.T) == (bad is None)  # a non-contiguous view


def test_integer_and_empty_tensors_are_finite() -> None:
    assert all_finite(torch.arange(10))
    assert all_finite(torch.empty(0, 4))


def test_finite_values_whose_sum_overflows_are_finite() -> None:
    """The sum is only a shortcut: finite values summing past the float32 range are still all finite."""
    big = torch.full((8,), 3e38)
    assert not bool(torch.isfinite(big.sum()))
    assert all_finite(big)
    big[3] = float("nan")
    assert not all_finite(big)
