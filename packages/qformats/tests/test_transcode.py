"""Bit-exact transcodes between every pair of compatible layouts; every impossible pair names why."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import TranscodeError
from qformats.logical import QuantizedWeight
from qformats.transcode import SCALAR_LAYOUTS, transcode, transcode_weight
from random_weights import random_weight

PAIRS = list(itertools.product(SCALAR_LAYOUTS, SCALAR_LAYOUTS))


def same(a: QuantizedWeight, b: QuantizedWeight) -> bool:
    return (
        np.array_equal(a.codes, b.codes)
        and np.array_equal(a.zeros, b.zeros)
        and np.array_equal(a.g_idx, b.g_idx)
        and a.scales.dtype == b.scales.dtype
        and np.array_equal(a.scales.view(np.uint8), b.scales.view(np.uint8))
    )


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_symmetric_4bit_transcodes_between_every_pair(src: str, dst: str) -> None:
    w = random_weight(np.random.default_rng(0), 128, 256, 4, 64, sym=True)
    start = transcode_weight(w, src)
    out = transcode(start.tensors, from_=src, to=dst, meta=start.meta)
    assert same(out.weight, w)
    back = transcode(out.tensors, from_=dst, to=src, meta=out.meta)
    for name, arr in start.tensors.items():
        assert np.array_equal(back.tensors[name].view(np.uint8), arr.view(np.uint8)), name


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    pair=st.sampled_from([p for p in PAIRS if "marlin" not in p]),
    gs=st.sampled_from([32, 64, 128]),
)
def test_asymmetric_transcodes_are_bit_exact(seed: int, pair: tuple[str, str], gs: int) -> None:
    src, dst = pair
    rng = np.random.default_rng(seed)
    w = random_weight(rng, 64, 256, 4, gs)
    # v1 (zero - 1) cannot hold a true zero of 0; keep zeros in [1, 15] so every GPTQ label applies.
    w = QuantizedWeight(w.codes, w.scales, np.maximum(w.zeros, 1), w.g_idx, 4, gs, False)
    start = transcode_weight(w, src)
    assert same(transcode(start.tensors, from_=src, to=dst, meta=start.meta).weight, w)


def test_gptq_to_awq_gemm_preserves_dequantized_values() -> None:
    w = random_weight(np.random.default_rng(4), 64, 128, 3, 32)
    start = transcode_weight(w, "gptq_v2")
    out = transcode(start.tensors, from_="gptq_v2", to="gemm", meta=start.meta)
    assert np.array_equal(out.weight.dequantize(), w.dequantize())


@pytest.mark.parametrize("dst", ["gemm", "gemv", "gemv_fast", "llm-awq", "awq_marlin"])
def test_act_order_into_a_layout_without_g_idx_is_refused(dst: str) -> None:
    w = random_weight(np.random.default_rng(5), 64, 256, 4, 64, act_order=True)
    start = transcode_weight(w, "gptq_v2")
    with pytest.raises(TranscodeError, match="act-order"):
        transcode(start.tensors, from_="gptq_v2", to=dst, meta=start.meta)


def test_act_order_into_marlin_is_kept() -> None:
    w = random_weight(np.random.default_rng(6), 64, 256, 4, 64, sym=True, act_order=True)
    start = transcode_weight(w, "gptq_v2")
    out = transcode(start.tensors, from_="gptq_v2", to="marlin", meta=start.meta)
    assert same(out.weight, w) and not out.weight.has_default_g_idx()


def test_asymmetric_into_symmetric_only_marlin_is_refused() -> None:
    w = random_weight(np.random.default_rng(7), 64, 256, 4, 64)
    start = transcode_weight(w, "gemm")
    with pytest.raises(TranscodeError, match="symmetric only"):
        transcode(start.tensors, from_="gemm", to="marlin", meta=start.meta)


@pytest.mark.parametrize("dst", ["gemm", "gemv", "gemv_fast", "marlin", "awq_marlin"])
def test_partial_group_into_a_layout_needing_divisibility_is_refused(dst: str) -> None:
    # in = 576 with group 128: a partial last group (SmolLM2's hidden size).
    w = random_weight(np.random.default_rng(8), 64, 576, 4, 128, sym=True)
    start = transcode_weight(w, "gptq_v2")
    with pytest.raises(TranscodeError, match="divisible"):
        transcode(start.tensors, from_="gptq_v2", to=dst, meta=start.meta)


def test_bits_the_target_cannot_store_are_refused() -> None:
    w = random_weight(np.random.default_rng(9), 64, 128, 3, 32, sym=True)
    with pytest.raises(TranscodeError, match="4-bit"):
        transcode_weight(w, "gemv")


def test_non_scalar_layouts_are_named() -> None:
    w = random_weight(np.random.default_rng(10), 64, 128, 4, 32)
    with pytest.raises(TranscodeError, match="not a scalar-code layout"):
        transcode_weight(w, "fp8")


def test_corrupt_source_is_a_transcode_error_naming_the_source() -> None:
    w = random_weight(np.random.default_rng(11), 64, 128, 4, 32)
    start = transcode_weight(w, "gemm")
    broken = {**start.tensors, "qweight": start.tensors["qweight"][:7]}
    with pytest.raises(TranscodeError, match=r"'gemm'.*qweight"):
        transcode(broken, from_="gemm", to="gptq_v2", meta=start.meta)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    out_blocks=st.integers(1, 2),
    in_blocks=st.integers(1, 3),
    bits=st.sampled_from([4, 8]),
    gs=st.sampled_from([-1, 32, 64, 128]),
    sym=st.booleans(),
    pair=st.sampled_from(PAIRS),
)
def test_generated_shapes_transcode_exactly_or_say_why(
    seed: int, out_blocks: int, in_blocks: int, bits: int, gs: int, sym: bool, pair: tuple[str, str]
) -> None:
    src, dst = pair
    w = random_weight(np.random.default_rng(seed), 64 * out_blocks, 128 * in_blocks, bits, gs, sym=sym)
    if sym is False:
        w = QuantizedWeight(w.codes, w.scales, np.maximum(w.zeros, 1), w.g_idx, bits, gs, False)
    try:
        start = transcode_weight(w, src)
    except TranscodeError:
        return  # the source layout itself cannot hold this weight (covered by the refusal tests)
    try:
        out = transcode(start.tensors, from_=src, to=dst, meta=start.meta)
    except TranscodeError as exc:
        from qformats.layouts.registry import get_layout

        assert get_layout(dst).cannot_represent(w) is not None, str(exc)
        return
    assert same(out.weight, w)
