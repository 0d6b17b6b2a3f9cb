"""Row-blocked dequantization: bit-identical to the unblocked formula for every block size, bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.checkpoint.dequantize import dense_weight
from qformats.logical import QuantizedWeight
from random_weights import random_weight


def unblocked(w: QuantizedWeight) -> np.ndarray:
    """The spec's formula written out whole: ``scales[g_idx].T * (codes - zeros[g_idx].T)`` in float32."""
    s = w.scales.astype(np.float32)[w.g_idx].T
    z = w.zeros.astype(np.float32)[w.g_idx].T
    return np.asarray(s * (w.codes.astype(np.float32) - z), dtype=np.float32)


@settings(max_examples=40, deadline=None)
@given(
    out=st.integers(1, 40),
    in_=st.integers(1, 70),
    bits=st.sampled_from([2, 3, 4, 8]),
    group_size=st.sampled_from([-1, 4, 16, 32]),
    act_order=st.booleans(),
    scale_dtype=st.sampled_from([np.float16, np.float32]),
    block=st.integers(1, 3000),
    seed=st.integers(0, 2**16),
)
def test_every_blocking_is_bit_identical(
    out: int,
    in_: int,
    bits: int,
    group_size: int,
    act_order: bool,
    scale_dtype: type,
    block: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    w = random_weight(rng, out, in_, bits, group_size, act_order=act_order, scale_dtype=scale_dtype)
    want = unblocked(w)
    got = w.dequantize(block_elements=block)
    assert got.dtype == np.float32 and got.shape == (out, in_)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    half = w.dequantize(np.float16, block_elements=block)
    assert half.dtype == np.float16 and np.array_equal(half, want.astype(np.float16))


def test_dense_weight_is_the_same_implementation() -> None:
    w = random_weight(np.random.default_rng(5), 33, 96, 4, 32, act_order=True)
    assert np.array_equal(dense_weight(w, "float32", rows=5), unblocked(w))
    assert np.array_equal(dense_weight(w, "float16", rows=1), unblocked(w).astype(np.float16))


def test_peak_extra_memory_is_about_one_output() -> None:
    # The unblocked formula holds ~4 full-size float32 temporaries; the blocked one ~1 output + small blocks.
    w = random_weight(np.random.default_rng(6), 512, 1024, 4, 128)
    out_bytes = 512 * 1024 * 4
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = w.dequantize(block_elements=1 << 14)
        _, blocked_peak = tracemalloc.get_traced_memory()
        del result
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        reference = unblocked(w)
        _, unblocked_peak = tracemalloc.get_traced_memory()
        del reference
    finally:
        tracemalloc.stop()
    assert blocked_peak < 1.25 * out_bytes
    assert unblocked_peak - base > 2.5 * out_bytes
