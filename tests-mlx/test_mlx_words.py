"""qformats' MLX words against MLX itself, both ways, for every width and group size MLX's affine mode has:
``mx.dequantize`` of lowbit's ``to_mlx`` tensors equals lowbit's dequantized weight (float32 scales: within
float32 rounding of ``biases = -scales * zeros``), and ``mx.quantize``'s own words unpack with
``qformats.layouts.mlx.unpack_words`` to codes whose ``scales * q + biases`` is ``mx.dequantize``'s result."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from qformats.layouts.mlx import MLX_BITS, MLX_GROUP_SIZES, to_mlx, unpack_mlx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qformats" / "tests"))

from random_weights import random_weight


@pytest.mark.parametrize("group_size", MLX_GROUP_SIZES)
@pytest.mark.parametrize("bits", MLX_BITS)
def test_mx_dequantize_reads_lowbit_words(bits: int, group_size: int) -> None:
    import mlx.core as mx

    weight = random_weight(np.random.default_rng(bits), 24, 384, bits, group_size, scale_dtype=np.float32)
    mlx = to_mlx(weight)
    got = mx.dequantize(mx.array(mlx.weight), mx.array(mlx.scales), mx.array(mlx.biases), group_size=group_size,
                        bits=bits)  # fmt: skip
    want = weight.dequantize()
    s = weight.scales[weight.g_idx].T
    bound = 2.0**-22 * (np.abs(s * weight.codes) + np.abs(s * weight.zeros[weight.g_idx].T)) + 2.0**-40
    assert np.all(np.abs(np.array(got) - want) <= bound)


@pytest.mark.parametrize("group_size", MLX_GROUP_SIZES)
@pytest.mark.parametrize("bits", MLX_BITS)
def test_lowbit_unpacks_mx_quantize_words(bits: int, group_size: int) -> None:
    import mlx.core as mx

    dense = mx.array(np.random.default_rng(bits + group_size).normal(size=(16, 256)).astype(np.float32))
    words, scales, biases = mx.quantize(dense, group_size=group_size, bits=bits)
    tensors = {"weight": np.array(words), "scales": np.array(scales), "biases": np.array(biases)}
    ours = unpack_mlx(tensors, bits=bits, group_size=group_size)
    theirs = np.array(mx.dequantize(words, scales, biases, group_size=group_size, bits=bits))
    assert np.allclose(ours.dequantize(), theirs, rtol=2.0**-22, atol=2.0**-30)
