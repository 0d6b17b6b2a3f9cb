"""compressed-tensors ``pack-quantized``: dense bit stream, layout round trips, validation, golden words.

The bit-stream reference here is a plain per-bit loop written from the format's definition (code k at
stream bits [b*k, b*k+b), words little-end first, ceil(n*b/32) words); compressed-tensors' own packer is
compared in tests-interop.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.compressed_tensors.bitstream import dense_words, pack_dense, unpack_dense
from qformats.layouts.registry import LayoutMeta, get_layout, registered_layouts
from qformats.logical import QuantizedWeight, default_g_idx
from random_weights import random_weight

LAYOUT = get_layout("pack-quantized")


def loop_pack(codes: list[int], bits: int) -> list[int]:
    """Per-bit reference packer: returns signed int32 word values."""
    words = [0] * dense_words(len(codes), bits)
    for k, code in enumerate(codes):
        for j in range(bits):
            if (code >> j) & 1:
                pos = k * bits + j
                words[pos // 32] |= 1 << (pos % 32)
    return [w - (1 << 32) if w >= 1 << 31 else w for w in words]


def test_registered_under_its_format_name() -> None:
    assert "pack-quantized" in registered_layouts()
    assert LAYOUT.key == "pack-quantized" and LAYOUT.marker_tensor == "weight_packed"


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("n", [1, 7, 32, 33, 70])
def test_pack_matches_the_per_bit_reference(bits: int, n: int) -> None:
    rng = np.random.default_rng(bits * 100 + n)
    codes = rng.integers(0, 1 << bits, (3, n)).astype(np.uint8)
    packed = pack_dense(codes, bits)
    assert packed.dtype == np.int32 and packed.shape == (3, -(-n * bits // 32))
    for row in range(3):
        assert packed[row].tolist() == loop_pack(codes[row].tolist(), bits)
    assert np.array_equal(unpack_dense(packed, bits, n), codes)


@settings(max_examples=40, deadline=None)
@given(bits=st.integers(1, 8), n=st.integers(1, 150), rows=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_unpack_inverts_pack(bits: int, n: int, rows: int, seed: int) -> None:
    codes = np.random.default_rng(seed).integers(0, 1 << bits, (rows, n)).astype(np.uint8)
    copy = codes.copy()
    assert np.array_equal(unpack_dense(pack_dense(codes, bits), bits, n), codes)
    assert np.array_equal(codes, copy)  # input untouched


def test_golden_words_4_and_3_bit() -> None:
    # 4-bit: eight codes per word, code k at shift 4k.
    assert pack_dense(np.arange(8, dtype=np.uint8)[None], 4).tolist() == [[0x76543210]]
    # 3-bit: 11 codes of 7 fill 33 bits: word0 all ones, word1 holds the 33rd bit only.
    assert pack_dense(np.full((1, 11), 7, dtype=np.uint8), 3).tolist() == [[-1, 1]]


def test_pack_rejects_out_of_range_codes() -> None:
    with pytest.raises(LayoutError, match=r"\[0, 7\]"):
        pack_dense(np.array([[8]], dtype=np.uint8), 3)
    with pytest.raises(LayoutError, match=r"1\.\.8"):
        pack_dense(np.array([[0]], dtype=np.uint8), 9)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("group_size", [16, -1])
def test_layout_round_trip(bits: int, sym: bool, group_size: int) -> None:
    weight = random_weight(np.random.default_rng(bits), 40, 64, bits, group_size, sym=sym)
    tensors = LAYOUT.pack(weight)
    assert ("weight_zero_point" in tensors) is (not sym)
    assert tensors["weight_scale"].shape == (40, weight.num_groups)
    assert tensors["weight_shape"].tolist() == [40, 64]
    meta = LayoutMeta(bits, group_size, 64, 40, sym)
    assert LAYOUT.validate(tensors, meta) == []
    back = LAYOUT.unpack(tensors, meta)
    assert back.equals(weight)
    assert back.meta["source_format"] == "pack-quantized"


def test_act_order_map_travels_as_weight_g_idx() -> None:
    weight = random_weight(np.random.default_rng(3), 32, 64, 4, 16, act_order=True)
    tensors = LAYOUT.pack(weight)
    assert np.array_equal(tensors["weight_g_idx"], weight.g_idx)
    assert LAYOUT.unpack(tensors, LayoutMeta(4, 16, 64, 32, False)).equals(weight)
    plain = random_weight(np.random.default_rng(3), 32, 64, 4, 16)
    assert "weight_g_idx" not in LAYOUT.pack(plain)


def test_dequantization_is_the_signed_formula() -> None:
    """(q_signed - zp_signed) * scale, the format's own definition, equals the logical dequantization."""
    weight = random_weight(np.random.default_rng(9), 16, 32, 4, 8, sym=False)
    tensors = LAYOUT.pack(weight)
    q_signed = unpack_dense(tensors["weight_packed"], 4, 32).astype(np.int32) - 8
    zp_signed = unpack_dense(np.ascontiguousarray(tensors["weight_zero_point"].T), 4, 16).astype(np.int32) - 8
    scale = tensors["weight_scale"].astype(np.float32)  # [out, G]
    groups = np.arange(32) // 8
    expected = (q_signed - zp_signed.T[:, groups]) * scale[:, groups]
    got = LAYOUT.unpack(tensors, LayoutMeta(4, 8, 32, 16, False)).dequantize()
    assert np.array_equal(got, expected.astype(np.float32))


def test_stored_bits_decide_symmetry() -> None:
    """A config saying asymmetric over tensors without zero points reads as symmetric (and says so)."""
    weight = random_weight(np.random.default_rng(5), 8, 32, 4, 32, sym=True)
    back = LAYOUT.unpack(LAYOUT.pack(weight), LayoutMeta(4, 32, 32, 8, sym=False))
    assert back.sym is True and back.meta["sym_from_tensors"] is True
    assert np.all(back.zeros == 8)


def test_tensor_strategy_scalar_scale_broadcasts() -> None:
    weight = random_weight(np.random.default_rng(6), 8, 32, 4, -1, sym=True)
    tensors = LAYOUT.pack(weight)
    tensors["weight_scale"] = np.array([0.5], dtype=np.float16)
    back = LAYOUT.unpack(tensors, LayoutMeta(4, -1, 32, 8))
    assert back.scales.shape == (1, 8) and np.all(back.scales == np.float16(0.5))


def test_cannot_represent_partial_groups_or_asymmetric_zeros_under_sym() -> None:
    partial = random_weight(np.random.default_rng(1), 8, 40, 4, 32)
    assert "divisible" in str(LAYOUT.cannot_represent(partial))
    with pytest.raises(UnsupportedLayoutError, match="divisible"):
        LAYOUT.pack(partial)
    w = random_weight(np.random.default_rng(2), 8, 32, 4, 32, sym=False)
    odd = QuantizedWeight(w.codes, w.scales, w.zeros, w.g_idx, 4, 32, True)
    if np.all(w.zeros == 8):
        pytest.fail("random zeros happened to be all 8; change the seed")
    assert "no zero point" in str(LAYOUT.cannot_represent(odd))
    with pytest.raises(LayoutError, match="int32 words only"):
        LAYOUT.pack(w, pack_dtype="int16")


def test_validate_names_every_broken_rule() -> None:
    weight = random_weight(np.random.default_rng(4), 16, 64, 4, 32, sym=False)
    meta = LayoutMeta(4, 32, 64, 16, False)
    good = LAYOUT.pack(weight)
    rules = {v.rule for v in LAYOUT.validate({"weight_scale": good["weight_scale"]}, meta)}
    assert rules == {"CT-MISSING"}
    bad = dict(good)
    bad["weight_packed"] = good["weight_packed"][:, :-1].astype(np.int64)
    bad["weight_scale"] = good["weight_scale"][:, :1]
    bad["weight_zero_point"] = good["weight_zero_point"][:1]
    bad["weight_shape"] = np.array([16, 63])
    bad["weight_g_idx"] = np.full(64, 5, dtype=np.int32)
    found = {(v.rule, v.tensor) for v in LAYOUT.validate(bad, meta)}
    assert found == {
        ("CT-DTYPE", "weight_packed"),
        ("CT-SHAPE", "weight_packed"),
        ("CT-GROUPS", "weight_scale"),
        ("CT-SHAPE", "weight_zero_point"),
        ("CT-WEIGHT-SHAPE", "weight_shape"),
        ("CT-GIDX-RANGE", "weight_g_idx"),
    }
    with pytest.raises(LayoutError, match=r"CT-WEIGHT-SHAPE\] weight_shape: expected \[16, 64\]"):
        LAYOUT.unpack(bad, meta)


def test_infer_meta_prefers_weight_shape() -> None:
    weight = random_weight(np.random.default_rng(8), 24, 96, 3, -1, sym=True)
    tensors = LAYOUT.pack(weight)
    meta = LAYOUT.infer_meta(tensors, bits=3, group_size=-1)
    assert (meta.out_features, meta.in_features) == (24, 96)
    no_shape = {k: v for k, v in tensors.items() if k != "weight_shape"}
    assert LAYOUT.infer_meta(no_shape, bits=3, group_size=-1).in_features == 96
    g = LAYOUT.pack(random_weight(np.random.default_rng(8), 24, 96, 4, 32))
    g.pop("weight_shape")
    assert LAYOUT.infer_meta(g, bits=4, group_size=32).in_features == 96
    with pytest.raises(LayoutError, match="weight_packed"):
        LAYOUT.infer_meta({}, bits=4, group_size=32)


def test_default_g_idx_is_not_written_and_is_restored() -> None:
    weight = random_weight(np.random.default_rng(10), 8, 64, 4, 16)
    back = LAYOUT.unpack(LAYOUT.pack(weight), LayoutMeta(4, 16, 64, 8, False))
    assert np.array_equal(back.g_idx, default_g_idx(64, 16))
