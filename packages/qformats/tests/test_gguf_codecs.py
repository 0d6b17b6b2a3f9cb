"""GGUF block codecs, bit for bit against the ``gguf`` package's numpy reference."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.gguf import decode_rows, encode_rows, ggml_type
from qformats.layouts.gguf.codec import DECODERS, ENCODERS

REFERENCE_ENCODES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
REFERENCE_DECODES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _edge_rows(cols: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    tiny = np.float32(1e-40)  # float32 denormal
    rows = [
        np.zeros(cols),
        np.full(cols, 0.5),
        np.full(cols, -3.0),
        rng.standard_normal(cols) * tiny,
        rng.standard_normal(cols) * 1e-6,
        rng.standard_normal(cols) * 6e4,
        np.tile([1.0, -1.0, 0.25, -0.75], cols // 4),
        np.linspace(-1, 1, cols),
        (rng.integers(-8, 8, cols) * 0.125),  # ties on the grid
    ]
    return np.stack(rows).astype(np.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference warns on its all-denormal block
@pytest.mark.parametrize("name", REFERENCE_ENCODES)
def test_encode_matches_reference_on_random_and_edge_values(name: str) -> None:
    rng = np.random.default_rng(0)
    random = (rng.standard_normal((12, 256)) * rng.uniform(1e-3, 50, (12, 1))).astype(np.float32)
    for weight in (random, _edge_rows(256)):
        ours = encode_rows(weight, name)
        assert np.array_equal(ours, quants.quantize(weight, getattr(Q, name)))


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(REFERENCE_ENCODES),
    rows=st.integers(1, 5),
    blocks=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e3]),
)
def test_encode_matches_reference_property(name: str, rows: int, blocks: int, seed: int, scale: float) -> None:
    weight = (np.random.default_rng(seed).standard_normal((rows, 32 * blocks)) * scale).astype(np.float32)
    assert np.array_equal(encode_rows(weight, name), quants.quantize(weight, getattr(Q, name)))


@pytest.mark.parametrize("name", REFERENCE_DECODES)
def test_decode_matches_reference_on_random_bytes(name: str) -> None:
    t = ggml_type(name)
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (6, 2 * t.type_size), dtype=np.uint8)
    # Keep every fp16 field finite so the comparison is about the decoder, then also check raw noise.
    with np.errstate(invalid="ignore", over="ignore"):
        expected = quants.dequantize(raw, getattr(Q, name))
    assert _same_bits(decode_rows(raw, name, 2 * t.block_size), expected)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q1_0"])
def test_decode_of_encoded_matches_reference(name: str) -> None:
    t = ggml_type(name)
    weight = np.random.default_rng(2).standard_normal((4, 2 * max(t.block_size, 256))).astype(np.float32)
    data = encode_rows(weight, name)
    ours = decode_rows(data, name, weight.shape[1])
    if name != "Q1_0":  # gguf 0.19 knows the Q1_0 id but has no numpy codec for it
        assert _same_bits(ours, quants.dequantize(data, getattr(Q, name)))
    bits = {"Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q5_1": 5, "Q8_0": 8, "Q4_K": 4, "Q5_K": 5, "Q6_K": 6, "Q1_0": 1}[name]
    err = np.abs(ours - weight).max()
    assert err < 4 * np.abs(weight).max() / 2 ** (bits - 1), (name, err)


@pytest.mark.parametrize("name", ["Q4_K", "Q5_K", "Q6_K"])
def test_k_encoders_are_exact_on_their_own_grid(name: str) -> None:
    """Values already on a K grid re-encode to the same bytes (the codes are recovered)."""
    weight = np.random.default_rng(3).standard_normal((3, 512)).astype(np.float32)
    first = encode_rows(weight, name)
    again = encode_rows(decode_rows(first, name, 512), name)
    assert np.array_equal(decode_rows(again, name, 512), decode_rows(first, name, 512))


def test_q1_0_follows_the_sign_and_mean_abs_rule() -> None:
    weight = np.random.default_rng(4).standard_normal((2, 256)).astype(np.float32)
    weight[0, 5] = 0.0  # zero counts as non-negative
    data = encode_rows(weight, "Q1_0")
    assert data.shape == (2, 36)
    d = np.abs(weight.reshape(4, 128)).mean(axis=1).astype(np.float16).astype(np.float32)
    expected = np.where(weight.reshape(4, 128) >= 0, d[:, None], -d[:, None]).reshape(2, 256)
    assert np.array_equal(decode_rows(data, "Q1_0", 256), expected)
    assert gguf.GGML_QUANT_SIZES[Q(41)] == (128, 18)
    assert ggml_type("Q1_0_g128") is ggml_type(41)


def test_q2_0_decodes_codes_minus_one_times_d() -> None:
    block = np.zeros((1, 18), dtype=np.uint8)
    block[0, :2] = np.array([0.5], dtype=np.float16).view(np.uint8)
    block[0, 2] = 0b11_10_01_00  # codes 0, 1, 2, 3 for elements 0..3 (low pair first)
    values = decode_rows(block, "Q2_0", 64)[0]
    assert values[:4].tolist() == [-0.5, 0.0, 0.5, 1.0]
    assert np.all(values[4:] == -0.5)
    with pytest.raises(UnsupportedLayoutError, match="Q2_0"):
        encode_rows(np.zeros((1, 64), np.float32), "Q2_0")


def test_every_listed_type_decodes() -> None:
    assert set(DECODERS) == {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                             "Q1_0", "Q2_0"}  # fmt: skip
    assert set(ENCODERS) == {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q1_0"}
    for name in DECODERS:
        t = ggml_type(name)
        if name != "Q2_0":  # gguf 0.19 has no id 42 yet
            assert gguf.GGML_QUANT_SIZES[Q(t.type_id)] == (t.block_size, t.type_size)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_values_are_refused(bad: float) -> None:
    weight = np.zeros((2, 32), np.float32)
    weight[1, 3] = bad
    with pytest.raises(LayoutError, match="weight: expected finite values for Q4_0, found 1 inf/nan"):
        encode_rows(weight, "Q4_0")


def test_partial_blocks_are_zero_padded_and_cropped() -> None:
    weight = np.random.default_rng(5).standard_normal((3, 40)).astype(np.float32)
    data = encode_rows(weight, "Q8_0")
    assert data.shape == (3, 2 * 34)
    padded = np.pad(weight, ((0, 0), (0, 24)))
    assert np.array_equal(data, quants.quantize(padded, Q.Q8_0))
    assert decode_rows(data, "Q8_0", 40).shape == (3, 40)


def test_wrong_row_width_is_named() -> None:
    with pytest.raises(LayoutError, match="qweight: expected 36 bytes per row for Q4_0 with in_features=64, found 35"):
        decode_rows(np.zeros((2, 35), np.uint8), "Q4_0", 64)
    with pytest.raises(UnsupportedLayoutError, match="ggml type 'Q9_9'"):
        ggml_type("Q9_9")
