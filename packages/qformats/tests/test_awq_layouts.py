"""AWQ GEMM / GEMV / GEMV_FAST / LLM-AWQ: golden words, round trips, validation and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.awq._interleave import deinterleave_codes, interleave_codes
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx
from random_weights import random_weight


def meta_of(w: QuantizedWeight) -> LayoutMeta:
    return LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym)


def test_gemm_4bit_order_map_golden_word() -> None:
    # columns 0..7 hold codes 0..7; nibble slot k holds column [0,2,4,6,1,3,5,7][k].
    codes = np.tile(np.arange(8, dtype=np.uint8), (1, 1)).reshape(8, 1).repeat(32, axis=1)
    w = QuantizedWeight(
        codes, np.ones((1, 8), np.float16), np.full((1, 8), 8, np.int32), default_g_idx(32, 32), 4, 32, True
    )
    t = get_layout("gemm").pack(w)
    assert t["qweight"].shape == (32, 1)
    assert int(t["qweight"].view(np.uint32)[0, 0]) == 0x75316420
    assert int(t["qzeros"].view(np.uint32)[0, 0]) == 0x88888888


def test_gemm_3bit_is_a_continuous_stream() -> None:
    # 11 output columns of code 7 (3 bits): bits 0..32 set -> word0 all ones, word1 == 1.
    codes = np.full((11, 32), 7, np.uint8)
    w = QuantizedWeight(
        codes, np.ones((1, 11), np.float16), np.zeros((1, 11), np.int32), default_g_idx(32, -1), 3, -1, False
    )
    t = get_layout("gemm").pack(w)
    assert t["qweight"].shape == (32, 2)
    assert int(t["qweight"].view(np.uint32)[0, 0]) == 0xFFFFFFFF
    assert int(t["qweight"].view(np.uint32)[0, 1]) == 0x1


def test_gemv_sequential_nibbles_golden_word() -> None:
    codes = np.tile(np.arange(8, dtype=np.uint8), 4)[None, :].repeat(4, axis=0)  # [4, 32]
    w = QuantizedWeight(
        codes, np.ones((1, 4), np.float16), np.full((1, 4), 3, np.int32), default_g_idx(32, 32), 4, 32, False
    )
    t = get_layout("gemv").pack(w)
    assert t["qweight"].shape == (4, 4)
    assert int(t["qweight"].view(np.uint32)[0, 0]) == 0x76543210
    # zeros_width(32, 32) = ceil(ceil(1/8)/4)*4 = 4 words = 32 padded groups.
    assert t["qzeros"].shape == (4, 4) and t["scales"].shape == (4, 32)
    assert int(t["qzeros"].view(np.uint32)[0, 0]) == 0x3
    assert not t["scales"][:, 1:].any()


def test_gemv_fast_interleave_golden_words() -> None:
    # c[n, k] = (k + n) % 16; word j of a 4-row block holds values 4j..4j+3 of the [4, 64] reordered block.
    n, k = 4, 64
    codes = ((np.arange(k)[None, :] + np.arange(n)[:, None]) % 16).astype(np.uint8)
    words = interleave_codes(codes).view(np.uint16)
    assert words.shape == (1, 64)
    assert int(words[0, 0]) == 0x8080  # row 0, original k = 0, 8, 16, 24
    assert int(words[0, 1]) == 0x9191  # row 0, original k = 1, 9, 17, 25
    assert int(words[0, 2]) == 0xA2A2  # row 0, original k = 2, 10, 18, 26
    assert int(words[0, 16]) == 0x9191  # row 1, original k = 0, 8, 16, 24 (codes +1)
    assert np.array_equal(deinterleave_codes(interleave_codes(codes)), codes)


@settings(max_examples=25, deadline=None)
@given(
    bits=st.integers(2, 8),
    out_blocks=st.integers(1, 6),
    groups=st.integers(1, 4),
    gs=st.sampled_from([16, 32, 64]),
    sym=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gemm_round_trip(bits: int, out_blocks: int, groups: int, gs: int, sym: bool, seed: int) -> None:
    out = out_blocks * 8 if bits == 4 else out_blocks * 5 + 3
    w = random_weight(np.random.default_rng(seed), out, groups * gs, bits, gs, sym=sym)
    layout = get_layout("gemm")
    t = layout.pack(w)
    assert layout.validate(t, meta_of(w)) == []
    assert layout.unpack(t, meta_of(w)).equals(w)


@pytest.mark.parametrize("key", ["gemv", "gemv_fast", "llm-awq"])
@pytest.mark.parametrize("gs", [16, 32, 64, 128])
@pytest.mark.parametrize("sym", [False, True])
def test_gemv_family_round_trip(key: str, gs: int, sym: bool) -> None:
    w = random_weight(np.random.default_rng(gs), 12, 256 if gs < 128 else 384, 4, gs, sym=sym)
    layout = get_layout(key)
    t = layout.pack(w)
    assert layout.validate(t, meta_of(w)) == []
    assert layout.unpack(t, meta_of(w)).equals(w)


def test_gemm_input_not_mutated_and_dequant_matches_spec_formula() -> None:
    w = random_weight(np.random.default_rng(1), 16, 64, 4, 32)
    before = w.codes.copy()
    t = get_layout("gemm").pack(w)
    assert np.array_equal(w.codes, before)
    # The spec's reader, written independently: nibble i -> column ORDER[i].
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    qw = t["qweight"].view(np.uint32)
    codes_t = np.empty((64, 16), np.int64)
    for col in range(qw.shape[1]):
        for i in range(8):
            codes_t[:, col * 8 + order[i]] = (qw[:, col] >> (4 * i)) & 0xF
    qz = t["qzeros"].view(np.uint32)
    z = np.empty((2, 16), np.int64)
    for col in range(qz.shape[1]):
        for i in range(8):
            z[:, col * 8 + order[i]] = (qz[:, col] >> (4 * i)) & 0xF
    ref = np.empty((16, 64), np.float32)
    for k in range(64):
        ref[:, k] = (codes_t[k] - z[k // 32]).astype(np.float32) * t["scales"][k // 32].astype(np.float32)
    assert np.array_equal(ref, w.dequantize())


def test_gemm_rejects_v1_style_zeros_with_awq_005() -> None:
    w = random_weight(np.random.default_rng(2), 16, 64, 4, 32, sym=True)
    bad = QuantizedWeight(w.codes, w.scales, w.zeros - 1, w.g_idx, 4, 32, True)
    t = get_layout("gemm").pack(bad)
    with pytest.raises(LayoutError, match="AWQ-005"):
        get_layout("gemm").unpack(t, meta_of(w))


def test_gemm_rejects_out_features_breaking_the_order_map_with_awq_004() -> None:
    meta = LayoutMeta(4, 32, 64, 12, False)
    tensors = {
        "qweight": np.zeros((64, 2), np.int32),
        "qzeros": np.zeros((2, 2), np.int32),
        "scales": np.zeros((2, 12), np.float16),
    }
    with pytest.raises(LayoutError, match="AWQ-004"):
        get_layout("gemm").unpack(tensors, meta)


def test_gemm_reports_shape_dtype_and_missing_tensors() -> None:
    w = random_weight(np.random.default_rng(3), 16, 64, 4, 32)
    t = get_layout("gemm").pack(w)
    rules = {v.rule for v in get_layout("gemm").validate({**t, "qweight": t["qweight"][:10]}, meta_of(w))}
    assert rules == {"AWQ-GEMM-SHAPE-QWEIGHT"}
    rules = {v.rule for v in get_layout("gemm").validate({**t, "qzeros": t["qzeros"].astype(np.int64)}, meta_of(w))}
    assert rules == {"AWQ-GEMM-DTYPE-QZEROS"}
    missing = {k: v for k, v in t.items() if k != "scales"}
    assert [v.tensor for v in get_layout("gemm").validate(missing, meta_of(w))] == ["scales"]


def test_llm_awq_names_its_zero_tensor_scaled_zeros() -> None:
    w = random_weight(np.random.default_rng(4), 8, 128, 4, 64)
    fast = get_layout("gemv_fast").pack(w)
    llm = get_layout("llm-awq").pack(w)
    assert set(fast) == {"qweight", "scales", "qzeros"} and set(llm) == {"qweight", "scales", "scaled_zeros"}
    assert np.array_equal(fast["qzeros"].view(np.uint16), llm["scaled_zeros"].view(np.uint16))
    violations = get_layout("llm-awq").validate(fast, meta_of(w))
    assert any(v.rule == "AWQ-LLM_AWQ-NAME" for v in violations)
    # scaled zeros are -scale*zero in the scales' dtype
    expect = (-(w.scales.astype(np.float32) * w.zeros.astype(np.float32))).astype(np.float16)
    assert np.array_equal(fast["qzeros"][:2].view(np.uint16), expect.view(np.uint16))


@pytest.mark.parametrize("key", ["gemm", "gemv", "gemv_fast", "llm-awq"])
def test_awq_layouts_refuse_act_order_and_partial_groups(key: str) -> None:
    rng = np.random.default_rng(5)
    act = random_weight(rng, 16, 128, 4, 64, act_order=True)
    if act.has_default_g_idx():  # pragma: no cover - permutation of 2 groups may be identity
        act = random_weight(rng, 16, 128, 4, 64, act_order=True)
    with pytest.raises(UnsupportedLayoutError, match="act-order"):
        get_layout(key).pack(act)
    partial = random_weight(rng, 16, 96, 4, 64)
    assert "divisible" in (get_layout(key).cannot_represent(partial) or "")


def test_gemv_family_refuses_other_bits_and_odd_group_sizes() -> None:
    rng = np.random.default_rng(6)
    assert "4-bit" in (get_layout("gemv").cannot_represent(random_weight(rng, 8, 64, 3, 32)) or "")
    assert "group_size" in (get_layout("gemv_fast").cannot_represent(random_weight(rng, 8, 96, 4, 48)) or "")
    with pytest.raises(UnsupportedLayoutError, match="int16"):
        get_layout("gemv_fast").pack(random_weight(rng, 8, 128, 4, 64), pack_dtype="int32")


def test_gemv_fast_refuses_zero_scale_with_nonzero_zero() -> None:
    w = random_weight(np.random.default_rng(7), 8, 128, 4, 64)
    scales = w.scales.copy()
    scales[0, 0] = 0
    zeros = w.zeros.copy()
    zeros[0, 0] = 5
    bad = QuantizedWeight(w.codes, scales, zeros, w.g_idx, 4, 64, False)
    assert "would read back" in (get_layout("gemv_fast").cannot_represent(bad) or "")
