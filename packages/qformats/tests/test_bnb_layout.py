"""bitsandbytes 4-bit and 8-bit weights without bitsandbytes: code tables, packing, quant state."""

from __future__ import annotations

import json

import numpy as np
import pytest
from qformats.errors import LayoutError
from qformats.layouts.bnb import (
    DYNAMIC,
    FP4,
    NF4,
    BnB4Weight,
    BnB8Weight,
    pack_bnb4,
    pack_bnb8,
    unpack_bnb4,
    unpack_bnb8,
    validate_bnb4,
    validate_bnb8,
)

# QLoRA (Dettmers et al. 2023), appendix E: the NF4 levels.
PUBLISHED_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]  # fmt: skip
# bitsandbytes FP4: sign bit, 2 exponent bits, 1 mantissa bit, codes 0b0000..0b0111, normalised by 12.
PUBLISHED_FP4_TIMES_12 = [0, 0.0625, 8, 12, 4, 6, 2, 3]


def test_tables_are_the_published_ones() -> None:
    assert NF4.dtype == np.float32 and NF4.tolist() == np.float32(PUBLISHED_NF4).tolist()
    assert np.array_equal(FP4[:8] * np.float32(12), np.float32(PUBLISHED_FP4_TIMES_12))
    assert np.array_equal(FP4[8:], -FP4[:8]) and FP4[8] == 0
    assert DYNAMIC.shape == (256,) and np.all(np.diff(DYNAMIC) > 0) and DYNAMIC[-1] == 1.0
    assert DYNAMIC.min() > -1 and np.count_nonzero(DYNAMIC == 0) == 1


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_codes_are_the_nearest_level_and_packed_high_nibble_first(quant_type: str) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 64)).astype(np.float32)
    q = BnB4Weight.quantize(w, quant_type=quant_type, blocksize=64, compress_statistics=False)
    table = NF4 if quant_type == "nf4" else FP4
    scaled = w / np.abs(w).max(axis=1, keepdims=True)
    nearest = np.abs(scaled.reshape(-1, 1) - table.reshape(1, -1)).min(axis=1)
    assert np.allclose(np.abs(scaled.reshape(-1) - table[q.codes()]), nearest, atol=1e-6)
    assert q.packed.shape == (6 * 64 // 2, 1)
    first = q.packed[0, 0]
    assert first >> 4 == q.codes()[0] and first & 15 == q.codes()[1]
    assert np.array_equal(q.dequantize(), table[q.codes()].reshape(6, 64) * np.abs(w).max(axis=1, keepdims=True))


def test_odd_sizes_partial_blocks_and_zero_blocks() -> None:
    w = np.random.default_rng(1).standard_normal((3, 33)).astype(np.float32)
    w[0] = 0.0
    q = BnB4Weight.quantize(w, quant_type="nf4", blocksize=32, compress_statistics=False)
    assert q.packed.shape == (50, 1) and q.absmax.shape == (4,)
    back = q.dequantize()
    assert back.shape == (3, 33) and np.all(back[0] == 0)
    assert np.abs(back - w).max() <= np.abs(w).max() * 0.16


@pytest.mark.parametrize("naming", ["reference", "hf"])
@pytest.mark.parametrize("nested", [False, True])
def test_tensors_round_trip_under_both_namings(naming: str, nested: bool) -> None:
    w = np.random.default_rng(2).standard_normal((16, 128)).astype(np.float16)
    q = BnB4Weight.quantize(w, quant_type="nf4", blocksize=64, compress_statistics=nested)
    tensors = pack_bnb4(q, naming=naming)
    expected = {"weight", "absmax", "quant_map", "quant_state"} | (
        {"nested_absmax", "nested_quant_map"} if nested else set()
    )
    sep = "_" if naming == "reference" else "."
    state = "weight_quant_state" if naming == "reference" else "weight.quant_state.bitsandbytes__nf4"
    assert set(tensors) == {"weight", state} | {f"weight{sep}{f}" for f in expected - {"weight", "quant_state"}}
    assert validate_bnb4(tensors) == []
    back = unpack_bnb4(tensors)
    assert np.array_equal(back.dequantize(), q.dequantize()) and back.dtype == "float16"
    assert (back.nested is not None) == nested
    if nested:
        assert q.absmax.dtype == np.uint8
        assert np.allclose(q.block_absmax(), np.abs(w.astype(np.float32)).reshape(-1, 64).max(axis=1), rtol=0.02)


def test_quant_state_record_is_bitsandbytes_json() -> None:
    q = BnB4Weight.quantize(np.ones((4, 64), np.float32), quant_type="nf4", blocksize=64)
    raw = pack_bnb4(q, naming="hf")["weight.quant_state.bitsandbytes__nf4"].tobytes().decode()
    assert raw == (
        '{"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [4, 64], "nested_blocksize": 256, '
        f'"nested_dtype": "float32", "nested_offset": {json.dumps(q.nested.offset)}}}'  # type: ignore[union-attr]
    )


def test_broken_tensors_are_named() -> None:
    q = BnB4Weight.quantize(np.ones((4, 64), np.float32), quant_type="fp4", blocksize=64)
    tensors = pack_bnb4(q)
    missing = {k: v for k, v in tensors.items() if k != "weight_nested_absmax"}
    assert [v.tensor for v in validate_bnb4(missing)] == ["weight_nested_absmax"]
    with pytest.raises(LayoutError, match="weight_nested_absmax: expected for a fp4 quant state"):
        unpack_bnb4(missing)
    garbage = {**tensors, "weight_quant_state": np.frombuffer(b"{not json", np.uint8)}
    assert validate_bnb4(garbage)[0].rule == "BNB4-STATE"
    short = {**tensors, "weight": tensors["weight"][:-1]}
    assert validate_bnb4(short)[0].rule == "BNB4-SHAPE"
    with pytest.raises(LayoutError, match="block_size"):
        BnB4Weight.quantize(np.ones((2, 2), np.float32), blocksize=48)


def test_int8_row_scaled() -> None:
    w = np.random.default_rng(3).standard_normal((5, 40)).astype(np.float32)
    w[2] = 0
    q = BnB8Weight.quantize(w)
    w16 = w.astype(np.float16).astype(np.float32)
    assert np.array_equal(q.scb, np.abs(w16).max(axis=1))
    assert np.abs(q.weight).max() == 127 and np.all(q.weight[2] == 0)
    assert np.allclose(q.dequantize(), w16, atol=np.abs(w16).max() / 127)
    for naming, name in (("reference", "weight_scb"), ("hf", "SCB")):
        tensors = pack_bnb8(q, naming=naming)
        assert name in tensors and validate_bnb8(tensors) == []
        assert np.array_equal(unpack_bnb8(tensors).dequantize(), q.dequantize())
    bad = {"weight": q.weight, "weight_scb": q.scb[:-1]}
    assert validate_bnb8(bad)[0].rule == "BNB8-SHAPE"
    with pytest.raises(LayoutError, match="BNB8-MISSING"):
        unpack_bnb8({"weight": q.weight, "SCB": q.scb, "weight_scb": q.scb})
