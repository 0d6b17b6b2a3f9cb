"""v1 <-> v2 zero-point conversion on packed words: constants, per-field paths, overflow reporting."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.layouts.gptq.bitstream import pack_stream, unpack_stream
from qformats.layouts.gptq.planar import pack_planar, unpack_planar
from qformats.layouts.gptq.zeros import v1_to_v2, v2_to_v1, zero_word_constant
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx


@pytest.mark.parametrize(
    ("bits", "dtype", "const"),
    [(4, "int32", 0x11111111), (2, "int32", 0x55555555), (8, "int32", 0x01010101), (4, "int8", 0x11),
     (2, "int16", 0x5555), (8, "int64", 0x0101010101010101), (4, "int64", 0x1111111111111111)],
)  # fmt: skip
def test_word_constants(bits: int, dtype: str, const: int) -> None:
    assert zero_word_constant(bits, dtype) == const


WORD_CASES = [(b, dt) for b in (2, 4, 8) for dt in ("int8", "int16", "int32", "int64")] + [(3, "int32")]


@pytest.mark.parametrize(("bits", "dtype"), WORD_CASES)
def test_round_trip_and_match_layout_pack(bits: int, dtype: str) -> None:
    rng = np.random.default_rng(bits)
    true_zeros = rng.integers(1, (1 << bits) - 1, (3, 64)).astype(np.uint8)  # no overflow field
    v2 = pack_stream(true_zeros, bits, dtype)
    conv = v2_to_v1(v2, bits)
    assert conv.lossless and conv.qzeros.dtype == v2.dtype
    np.testing.assert_array_equal(conv.qzeros, pack_stream(true_zeros - 1, bits, dtype))
    back = v1_to_v2(conv.qzeros, bits)
    assert back.lossless
    np.testing.assert_array_equal(back.qzeros, v2)


def test_asymmetric_overflow_is_reported_with_reference_carry() -> None:
    zeros = np.array([[0, 3, 5, 7, 9, 11, 13, 15]], dtype=np.uint8)
    v2 = pack_stream(zeros, 4, "int32")
    conv = v2_to_v1(v2, 4)
    assert conv.overflow_fields == 1 and not conv.lossless
    # whole-word subtract: field 0 borrows from field 1 (the reference writes exactly this word)
    assert (int(conv.qzeros[0, 0]) & 0xFFFFFFFF) == ((0xFDB97530 - 0x11111111) & 0xFFFFFFFF)
    up = v1_to_v2(pack_stream(np.array([[15, 1, 2, 3, 4, 5, 6, 7]], np.uint8), 4), 4)
    assert up.overflow_fields == 1


def test_overflow_count_ignores_padding_columns() -> None:
    v2 = pack_stream(np.full((2, 5), 8, np.uint8), 4, "int32")  # 5 real fields, 3 padding zeros
    assert v2_to_v1(v2, 4, columns=5).overflow_fields == 0
    assert v2_to_v1(v2, 4).overflow_fields == 6


@pytest.mark.parametrize("bits", [3, 5, 6, 7])
def test_planar_per_field_conversion(bits: int) -> None:
    rng = np.random.default_rng(bits)
    zeros = rng.integers(0, 1 << bits, (2, 64)).astype(np.uint8)
    words = pack_planar(zeros, bits)
    conv = v2_to_v1(words, bits, planar=True)
    assert conv.overflow_fields == int(np.count_nonzero(zeros == 0))
    np.testing.assert_array_equal(unpack_planar(conv.qzeros, bits, 64), (zeros.astype(int) - 1) % (1 << bits))
    np.testing.assert_array_equal(v1_to_v2(conv.qzeros, bits, planar=True).qzeros, words)


def test_three_bit_continuous_per_field() -> None:
    zeros = np.arange(64, dtype=np.uint8)[None, :] % 8
    conv = v2_to_v1(pack_stream(zeros, 3), 3)
    assert conv.overflow_fields == 8
    np.testing.assert_array_equal(unpack_stream(conv.qzeros, 3, 64), (zeros.astype(int) - 1) % 8)


def test_input_words_not_mutated() -> None:
    v2 = pack_stream(np.full((2, 8), 8, np.uint8), 4)
    before = v2.copy()
    v2_to_v1(v2, 4)
    np.testing.assert_array_equal(v2, before)


def _weight(zeros: np.ndarray, bits: int = 4) -> QuantizedWeight:
    out = zeros.shape[1]
    return QuantizedWeight(np.zeros((out, 32), np.uint8), np.ones((1, out), np.float16), zeros.astype(np.int32),
                           default_g_idx(32, -1), bits, -1, False)  # fmt: skip


def test_v1_layout_refuses_true_zero_zero_and_v2_refuses_two_pow_bits() -> None:
    reason = get_layout("gptq").cannot_represent(_weight(np.array([[0, 5]])))
    assert reason is not None and "underflows" in reason
    assert get_layout("gptq_v2").cannot_represent(_weight(np.array([[0, 5]]))) is None
    assert "[0, 15]" in (get_layout("gptq_v2").cannot_represent(_weight(np.array([[16, 5]]))) or "")
    assert get_layout("gptq").cannot_represent(_weight(np.array([[16, 5]]))) is None


def test_v1_full_field_reads_as_two_pow_bits_and_is_recorded() -> None:
    weight = _weight(np.array([[16, 5, 1, 8, 8, 8, 8, 8]]))
    tensors = get_layout("gptq").pack(weight)
    back = get_layout("gptq").unpack(tensors, LayoutMeta(4, -1, 32, 8, False))
    assert back.equals(weight)
    assert back.meta["v1_zero_overflow_fields"] == 1
