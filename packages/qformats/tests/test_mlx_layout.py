"""MLX affine words and the exact bridge from GPTQ/AWQ logical weights (numpy only).

Tolerance of the dequantization check: codes and scales carry over bit exactly, and the bias is
``-s * z`` rounded once to the scale dtype. ``s * z`` is exact in float32 (a float16 scale has 11
significant bits, a zero at most 8), so the stored bias is off by at most ``u * |s * z|`` (``u`` the unit
roundoff: float16 ``2**-11``, bfloat16 ``2**-8``, float32 ``2**-24``; plus half the smallest float16
subnormal, ``2**-25``, for tiny products). Both formulas, ``s * q + b`` and the logical ``s * (q - z)``, then
round in float32 (exact products for float16 scales; for float32 scales each product and the sum round
once, at most ``2**-24`` of ``|s*q| + |s*z|`` each): the tests allow ``2**-22 * (|s*q| + |s*z|)`` for that.
They assert the bound element by element, and that it is not loose: with asymmetric zeros float16 biases
do differ from the exact ``-s * z`` (symmetric zeros are powers of two, so there ``-s * z`` is exact).
"""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError, TranscodeError
from qformats.layouts.mlx import MLX_BITS, mlx_group_size, pack_words, to_mlx, unpack_mlx, unpack_words
from qformats.layouts.mlx.affine import round_to
from qformats.logical import QuantizedWeight
from random_weights import random_weight

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}


def affine_bound(weight: QuantizedWeight, dtype: str) -> np.ndarray:
    """Per-element bound on |MLX dequantized - logical dequantized| (see the module docstring)."""
    s = weight.scales.astype(np.float32)[weight.g_idx].T  # [out, in]
    z = weight.zeros.astype(np.float32)[weight.g_idx].T
    sz = np.abs(s * z)
    return UNIT_ROUNDOFF[dtype] * sz + 2.0**-22 * (np.abs(s * weight.codes) + sz) + 2.0**-25


@pytest.mark.parametrize("bits", MLX_BITS)
def test_words_round_trip_for_every_mlx_width(bits: int) -> None:
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, (3, 5, 96)).astype(np.uint8)
    words = pack_words(codes, bits)
    assert words.dtype == np.uint32 and words.shape == (3, 5, 96 * bits // 32)
    assert np.array_equal(unpack_words(words, bits, 96), codes)


def test_words_are_little_endian_streams_low_bits_first() -> None:
    four = pack_words(np.array([[1, 2, 3, 4, 5, 6, 7, 8] * 4], np.uint8), 4)
    assert four[0, 0] == 0x87654321
    three = np.zeros((1, 32), np.uint8)
    three[0, 10] = 0b101  # stream bits 30..32: straddles words 0 and 1
    assert pack_words(three, 3).tolist() == [[0x40000000, 0x1, 0x0]]
    six = np.zeros((1, 32), np.uint8)
    six[0, 5] = 0b111111  # stream bits 30..35
    assert pack_words(six, 6)[0, :2].tolist() == [0xC0000000, 0xF]


def test_words_refuse_out_of_range_codes_and_ragged_rows() -> None:
    with pytest.raises(LayoutError, match=r"values in \[0, 15\]"):
        pack_words(np.full((1, 32), 16, np.uint8), 4)
    with pytest.raises(LayoutError, match="multiple of 32"):
        pack_words(np.zeros((1, 48), np.uint8), 4)
    with pytest.raises(LayoutError, match="8-bit codes, found 7"):
        pack_words(np.zeros((1, 32), np.uint8), 7)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("sym", [True, False])
def test_gptq_codes_to_mlx_dequantize_within_the_bias_rounding(bits: int, group_size: int, sym: bool) -> None:
    weight = random_weight(np.random.default_rng(bits * group_size), 48, 256, bits, group_size, sym=sym)
    mlx = to_mlx(weight)
    assert (mlx.bits, mlx.group_size, mlx.scale_dtype) == (bits, group_size, "float16")
    assert mlx.weight.shape == (48, 256 * bits // 32) and mlx.scales.shape == (48, 256 // group_size)
    assert np.array_equal(mlx.codes(), weight.codes)
    assert np.array_equal(mlx.scales.view(np.uint16), weight.scales.T.view(np.uint16))
    delta = np.abs(mlx.dequantize() - weight.dequantize())
    assert np.all(delta <= affine_bound(weight, "float16"))
    exact_bias = -(weight.scales.astype(np.float32) * weight.zeros).T
    # symmetric zeros are 2**(bits-1): -s*z is a float16 exactly; asymmetric zeros make the rounding real
    assert np.array_equal(mlx.biases.astype(np.float32), exact_bias) == sym


@pytest.mark.parametrize(
    ("in_", "group_size", "run"),
    [(512, 256, 128), (256, -1, 128), (192, -1, 64), (192, 128, 64), (96, 64, 32)],
)
def test_groups_mlx_lacks_are_stored_exactly_as_runs(in_: int, group_size: int, run: int) -> None:
    # group 256 / per-channel: the scale repeated over 128-column runs; a partial last group of 64 (192 = 128 + 64)
    # or 32 (96 = 64 + 32): runs of 64 or 32 columns, each inside one source group
    weight = random_weight(np.random.default_rng(in_), 16, in_, 4, group_size)
    assert mlx_group_size(weight) == run
    mlx = to_mlx(weight)
    assert mlx.group_size == run and mlx.scales.shape == (16, in_ // run)
    assert np.all(np.abs(mlx.dequantize() - weight.dequantize()) <= affine_bound(weight, "float16"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_scale_dtypes_bound_the_bias_by_their_own_roundoff(dtype: str) -> None:
    weight = random_weight(np.random.default_rng(7), 32, 128, 4, 64, scale_dtype=np.float32)
    if dtype == "bfloat16":  # scales read from a BF16 tensor: float32 arrays holding bfloat16 values
        scales = round_to(weight.scales, "bfloat16")
        weight = QuantizedWeight(weight.codes, scales, weight.zeros, weight.g_idx, 4, 64, weight.sym)
    mlx = to_mlx(weight, scale_dtype=dtype)
    assert mlx.scales.dtype == np.float32 and mlx.scale_dtype == dtype
    assert np.array_equal(mlx.scales, weight.scales.T)
    if dtype == "bfloat16":
        assert not np.any(mlx.biases.view(np.uint32) & 0xFFFF)
    assert np.all(np.abs(mlx.dequantize() - weight.dequantize()) <= affine_bound(weight, dtype))


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("act_order", r"act-order g_idx \(desc_act\).*no group index"),
        ("group16", r"group size 16: a contiguous run of 32 input columns spans several groups"),
        ("bits7", r"7-bit codes: MLX affine stores 1, 2, 3, 4, 5, 6, 8-bit codes"),
        ("in48", r"in_features 48 is not a multiple of 32"),
    ],
)
def test_weights_mlx_cannot_hold_are_refused_with_the_rule(case: str, rule: str) -> None:
    rng = np.random.default_rng(3)
    weight = {
        "act_order": lambda: random_weight(rng, 8, 128, 4, 32, act_order=True),
        "group16": lambda: random_weight(rng, 8, 128, 4, 16),
        "bits7": lambda: random_weight(rng, 8, 128, 7, 32),
        "in48": lambda: random_weight(rng, 8, 48, 4, -1),
    }[case]()
    with pytest.raises(TranscodeError, match=rule):
        to_mlx(weight)


def test_unpack_mlx_checks_every_tensor() -> None:
    mlx = to_mlx(random_weight(np.random.default_rng(1), 8, 64, 4, 32))
    back = unpack_mlx(mlx.tensors(), bits=4, group_size=32)
    assert np.array_equal(back.dequantize(), mlx.dequantize())
    with pytest.raises(LayoutError, match="missing tensor"):
        unpack_mlx({"weight": mlx.weight, "scales": mlx.scales}, bits=4, group_size=32)
    with pytest.raises(LayoutError, match=r"biases: expected float16 \(8, 2\)"):
        unpack_mlx({**mlx.tensors(), "biases": mlx.biases[:, :1]}, bits=4, group_size=32)
    with pytest.raises(LayoutError, match="group_size: MLX affine groups are 32, 64 or 128"):
        unpack_mlx(mlx.tensors(), bits=4, group_size=16)
    with pytest.raises(LayoutError, match="weight: expected uint32"):
        unpack_mlx({**mlx.tensors(), "weight": mlx.weight.view(np.int32)}, bits=4, group_size=32)
