"""Codes from dense weights: the reference packer formula, saturation instead of wrap, negative g_idx."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError
from qformats.layouts.gptq.codes import codes_from_dense, weight_from_dense
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import default_g_idx


def test_formula_and_saturation() -> None:
    scales = np.array([[0.5]], np.float32)
    zeros = np.array([[8]], np.int32)
    w = np.array([[0.0, 0.5, -4.0, 3.5, 100.0, -100.0, 0.25, 0.75]], np.float32)
    codes = codes_from_dense(w, scales, zeros, np.zeros(8, np.int32), 4)
    # 0.25/0.5 + 8 = 8.5 -> 8 (half to even); 0.75/0.5 + 8 = 9.5 -> 10
    assert codes.tolist() == [[8, 9, 0, 15, 15, 0, 8, 10]]


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 7, 8])
def test_out_of_grid_weights_saturate_and_survive_packing(bits: int) -> None:
    rng = np.random.default_rng(bits)
    w = (rng.choice([-1.0, 1.0], (32, 64)) * (5 + rng.random((32, 64)))).astype(np.float32)  # far off the grid
    scales = np.full((2, 32), 0.01, np.float32)
    zeros = np.full((2, 32), 1 << (bits - 1), np.int32)
    qw = weight_from_dense(w, scales, zeros, default_g_idx(64, 32), bits=bits, group_size=32, sym=True)
    top = (1 << bits) - 1
    np.testing.assert_array_equal(qw.codes, np.where(w > 0, top, 0))
    key = "gptq_p" if bits in (5, 6, 7) else "gptq_v2"
    tensors = get_layout(key).pack(qw)
    assert get_layout(key).unpack(tensors, LayoutMeta(bits, 32, 64, 32, True)).equals(qw)


def test_negative_g_idx_is_normalized() -> None:
    w = np.ones((2, 4), np.float32)
    scales = np.array([[1.0, 1.0], [0.5, 0.5]], np.float32)
    zeros = np.zeros((2, 2), np.int32)
    qw = weight_from_dense(w, scales, zeros, np.array([0, -1, 0, 1]), bits=4, group_size=2, sym=False)
    assert qw.g_idx.tolist() == [0, 1, 0, 1] and qw.codes.tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scales": np.zeros((1, 2), np.float32)}, "finite non-zero"),
        ({"weight": np.ones((2, 4), np.int32)}, "2-D float"),
        ({"g_idx": np.array([0, 0, 0, 5])}, "g_idx: expected values"),
        ({"zeros": np.zeros((2, 2), np.int32)}, "scales/zeros"),
    ],
)
def test_bad_inputs_named(kwargs: dict[str, np.ndarray], message: str) -> None:
    args = {
        "weight": np.ones((2, 4), np.float32),
        "scales": np.ones((1, 2), np.float32),
        "zeros": np.zeros((1, 2), np.int32),
        "g_idx": np.zeros(4, np.int32),
    }
    args.update(kwargs)
    with pytest.raises(LayoutError, match=message):
        codes_from_dense(args["weight"], args["scales"], args["zeros"], args["g_idx"], 4)
