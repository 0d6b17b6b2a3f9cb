"""Hand-computed golden words for GPTQ v1/v2/planar, and parity with a frozen loop packer."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.layouts.gptq.bitstream import pack_stream, unpack_stream
from qformats.layouts.gptq.planar import pack_planar, unpack_planar
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx


def u32(words: np.ndarray) -> list[int]:
    return [int(w) for w in np.asarray(words).astype(np.int64).ravel() & 0xFFFFFFFF]


def sym_weight(bits: int, out: int = 32, in_: int = 64) -> QuantizedWeight:
    rng = np.random.default_rng(bits)
    return QuantizedWeight(
        codes=rng.integers(0, 1 << bits, (out, in_), dtype=np.uint8),
        scales=np.full((1, out), 0.5, dtype=np.float16),
        zeros=np.full((1, out), 1 << (bits - 1), dtype=np.int32),
        g_idx=default_g_idx(in_, -1),
        bits=bits,
        group_size=-1,
        sym=True,
    )


@pytest.mark.parametrize(
    ("bits", "v2_word", "v1_word"),
    [(4, 0x88888888, 0x77777777), (2, 0xAAAAAAAA, 0x55555555), (8, 0x80808080, 0x7F7F7F7F)],
)
def test_symmetric_zero_words(bits: int, v2_word: int, v1_word: int) -> None:
    weight = sym_weight(bits)
    assert set(u32(get_layout("gptq_v2").pack(weight)["qzeros"])) == {v2_word}
    assert set(u32(get_layout("gptq").pack(weight)["qzeros"])) == {v1_word}
    assert set(u32(get_layout("gptq_p").pack(weight)["qzeros"])) == {v2_word}


def test_four_bit_qweight_word_little_end_first() -> None:
    codes = np.array([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=np.uint8)  # one output row, 8 input columns
    assert u32(pack_stream(codes, 4, "int32")) == [0x87654321]
    assert [int(w) & 0xFF for w in pack_stream(codes, 4, "int8").ravel()] == [0x21, 0x43, 0x65, 0x87]
    assert u32(pack_stream(codes[:, :4], 8, "int32")) == [0x04030201]
    assert u32(pack_stream(np.array([[1, 2, 3, 0, 3, 2, 1, 0] * 2], np.uint8), 2, "int32")) == [0x1B391B39]


THREE_BIT_CODES = np.array([(5 * k + 3) % 8 for k in range(32)], dtype=np.uint8)


def test_three_bit_block_of_32_codes() -> None:
    # Worked by hand from the spec: word0 = codes 0-9 at shifts 0..27 + low 2 bits of code 10 at 30;
    # word1 = bit 2 of code 10, codes 11-20 at shifts 1..28, bit 0 of code 21 at 31; word2 = the rest.
    assert u32(pack_stream(THREE_BIT_CODES[None, :], 3, "int32")) == [0x43C67543, 0x7543C675, 0xC67543C6]
    np.testing.assert_array_equal(unpack_stream(pack_stream(THREE_BIT_CODES[None], 3), 3, 32)[0], THREE_BIT_CODES)


def test_three_bit_qweight_packs_down_rows() -> None:
    codes = np.stack([THREE_BIT_CODES, THREE_BIT_CODES[::-1]] * 16)  # [out=32, in=32]
    weight = QuantizedWeight(codes, np.ones((1, 32), np.float16), np.full((1, 32), 4, np.int32),
                             default_g_idx(32, -1), 3, -1, True)  # fmt: skip
    qweight = get_layout("gptq_v2").pack(weight)["qweight"]
    assert qweight.shape == (3, 32)
    assert u32(qweight[:, 0]) == [0x43C67543, 0x7543C675, 0xC67543C6]
    assert u32(qweight[:, 1]) == u32(pack_stream(THREE_BIT_CODES[None, ::-1], 3))


def test_planar_three_bit_block() -> None:
    lo, hi = THREE_BIT_CODES & 3, THREE_BIT_CODES >> 2
    expect_lo = [sum(int(lo[16 * w + j]) << (2 * j) for j in range(16)) for w in range(2)]
    expect_hi = [sum(int(hi[j]) << j for j in range(32))]
    words = pack_planar(THREE_BIT_CODES[None, :], 3)
    assert u32(words) == expect_lo + expect_hi
    assert u32(words) != u32(pack_stream(THREE_BIT_CODES[None, :], 3))
    np.testing.assert_array_equal(unpack_planar(words, 3, 32)[0], THREE_BIT_CODES)


@pytest.mark.parametrize("bits", [5, 6, 7])
def test_planar_wide_bits_by_hand(bits: int) -> None:
    codes = np.array([(7 * k + 5) % (1 << bits) for k in range(32)], dtype=np.uint8)
    expected: list[int] = []
    offset = 0
    for width in {5: (4, 1), 6: (4, 2), 7: (4, 2, 1)}[bits]:
        plane = (codes >> offset) & ((1 << width) - 1)
        per = 32 // width
        expected += [sum(int(plane[per * w + j]) << (width * j) for j in range(per)) for w in range(width)]
        offset += width
    assert u32(pack_planar(codes[None, :], bits)) == expected


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_planar_single_plane_equals_continuous(bits: int) -> None:
    weight = sym_weight(bits, out=64, in_=96)
    planar = get_layout("gptq_p").pack(weight)
    cont = get_layout("gptq_v2").pack(weight)
    for name in ("qweight", "qzeros"):
        np.testing.assert_array_equal(planar[name], cont[name])


def test_planar_three_bit_differs_but_dequantizes_identically() -> None:
    weight = sym_weight(3, out=64, in_=96)
    planar, cont = get_layout("gptq_p").pack(weight), get_layout("gptq_v2").pack(weight)
    assert not np.array_equal(planar["qweight"], cont["qweight"])
    meta = LayoutMeta(3, -1, 96, 64, True)
    a = get_layout("gptq_p").unpack(planar, meta).dequantize()
    b = get_layout("gptq_v2").unpack(cont, meta).dequantize()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, weight.dequantize())


def legacy_loop_pack(intweight: np.ndarray, bits: int) -> np.ndarray:
    """A deliberately naive packer written from the spec's description (rows = input channels)."""
    intweight = intweight.astype(np.uint32)
    rows = intweight.shape[0] // 32 * bits
    qweight = np.zeros((rows, intweight.shape[1]), dtype=np.uint32)
    i = row = 0
    while row < rows:
        if bits in (2, 4, 8):
            for j in range(i, i + 32 // bits):
                qweight[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        else:  # 3-bit: 10 codes, 2+1 stitched bits, 10 codes, 1+2 stitched bits, 10 codes
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i))
            i += 10
            qweight[row] |= intweight[i] << 30
            row += 1
            qweight[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            qweight[row] |= intweight[i] << 31
            row += 1
            qweight[row] |= (intweight[i] >> 1) & 3
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
    return qweight.view(np.int32)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_vectorized_packer_matches_loop_packer(bits: int) -> None:
    rng = np.random.default_rng(bits + 10)
    codes = rng.integers(0, 1 << bits, (32, 128), dtype=np.uint8)  # [out, in]
    weight = QuantizedWeight(codes, np.ones((1, 32), np.float16), np.full((1, 32), 1, np.int32),
                             default_g_idx(128, -1), bits, -1, False)  # fmt: skip
    ours = get_layout("gptq_v2").pack(weight)["qweight"]
    np.testing.assert_array_equal(ours, legacy_loop_pack(codes.T.copy(), bits))
