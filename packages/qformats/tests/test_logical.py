"""The logical weight: the dequantization formula, partial last groups, act-order g_idx, checks."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError
from qformats.logical import QuantizedWeight, default_g_idx, group_count


def test_dequantize_by_hand_with_partial_last_group() -> None:
    codes = np.array([[0, 1, 2, 3, 4], [15, 14, 13, 12, 11]], dtype=np.uint8)  # in = 5, group 2 -> 3 groups
    scales = np.array([[0.5, 1.0], [2.0, 0.25], [4.0, 3.0]], dtype=np.float16)
    zeros = np.array([[1, 8], [2, 9], [3, 10]], dtype=np.int32)
    w = QuantizedWeight(codes, scales, zeros, default_g_idx(5, 2), 4, 2, False)
    expect = np.array(
        [[0.5 * (0 - 1), 0.5 * (1 - 1), 2.0 * (2 - 2), 2.0 * (3 - 2), 4.0 * (4 - 3)],
         [1.0 * (15 - 8), 1.0 * (14 - 8), 0.25 * (13 - 9), 0.25 * (12 - 9), 3.0 * (11 - 10)]],
        dtype=np.float32,
    )  # fmt: skip
    out = w.dequantize()
    assert out.dtype == np.float32 and out.shape == (2, 5)
    np.testing.assert_array_equal(out, expect)
    assert group_count(5, 2) == 3 and w.num_groups == 3


def test_act_order_g_idx_gathers_per_column() -> None:
    g_idx = np.array([1, 0, 1, 0], dtype=np.int32)  # non-monotone
    w = QuantizedWeight(np.array([[3, 3, 3, 3]], np.uint8), np.array([[1.0], [10.0]], np.float32),
                        np.array([[1], [2]], np.int32), g_idx, 4, 2, False)  # fmt: skip
    np.testing.assert_array_equal(w.dequantize(), [[10.0, 2.0, 10.0, 2.0]])
    assert not w.has_default_g_idx()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"codes": np.zeros((2, 4, 1), np.uint8)}, "codes: expected 2-D"),
        ({"codes": np.full((2, 4), 16, np.uint8)}, r"codes: expected values in \[0, 15\]"),
        ({"scales": np.ones((1, 2), np.float32)}, r"scales: expected shape \(2, 2\)"),
        ({"scales": np.ones((2, 2), np.int32)}, "scales: expected a float dtype"),
        ({"zeros": np.ones((2, 2), np.float32)}, "zeros: expected an integer dtype"),
        ({"g_idx": np.array([0, 0, 1, 2], np.int32)}, r"g_idx: expected values in \[0, 2\)"),
        ({"g_idx": np.array([0, 1], np.int32)}, "g_idx: expected shape"),
        ({"bits": 9}, "bits: expected 1..8"),
    ],
)
def test_malformed_weights_are_named(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "codes": np.zeros((2, 4), np.uint8),
        "scales": np.ones((2, 2), np.float32),
        "zeros": np.zeros((2, 2), np.int32),
        "g_idx": default_g_idx(4, 2),
        "bits": 4,
        "group_size": 2,
        "sym": True,
    }
    fields.update(change)
    with pytest.raises(LayoutError, match=message):
        QuantizedWeight(**fields)  # type: ignore[arg-type]
