"""Benchmark: ``QuantizedWeight.dequantize`` (row-blocked, in place) against the unblocked formula.

Run: ``.venv/bin/python benchmarks/bench_qformats_dequantize.py``

For a 4096x4096 and an 11008x4096 (out x in) 4-bit group-128 weight (float16 scales, asymmetric), and
once with act-order ``g_idx``: seconds and peak extra memory of

* baseline: the formula written whole, ``scales[g_idx].T * (codes - zeros[g_idx].T)`` in float32
  (what ``dequantize`` did before: ~4 full-size float32 temporaries);
* blocked: ``weight.dequantize()`` (float32 result) and ``weight.dequantize(float16)``.

The blocked float32 result is checked bit-identical to the baseline. Seconds are wall time (best of 3);
peak memory is the peak of numpy allocations seen by ``tracemalloc``, in units of the float32 output
size. Nothing is asserted about time; the table is printed.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from functools import partial

import numpy as np
from qformats.logical import QuantizedWeight, default_g_idx


def make_weight(out: int, in_: int, act_order: bool) -> QuantizedWeight:
    rng = np.random.default_rng(0)
    groups = in_ // 128
    g_idx = default_g_idx(in_, 128)
    if act_order:
        g_idx = rng.permutation(g_idx).astype(np.int32)
    return QuantizedWeight(
        codes=rng.integers(0, 16, (out, in_), dtype=np.uint8),
        scales=(rng.random((groups, out)) * 0.1 + 0.001).astype(np.float16),
        zeros=rng.integers(0, 16, (groups, out)).astype(np.int32),
        g_idx=g_idx,
        bits=4,
        group_size=128,
        sym=False,
    )


def unblocked(w: QuantizedWeight) -> np.ndarray:
    s = w.scales.astype(np.float32)[w.g_idx].T
    z = w.zeros.astype(np.float32)[w.g_idx].T
    return np.asarray(s * (w.codes.astype(np.float32) - z), dtype=np.float32)


def measure(fn: Callable[[], np.ndarray]) -> tuple[float, float, np.ndarray]:
    """(best seconds of 3, peak traced bytes of one call, result)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, float(peak), result


def main() -> None:
    print(f"{'weight':<24} {'method':<22} {'seconds':>8} {'x base':>7} {'peak/out':>9}")
    for out, in_, act in ((4096, 4096, False), (11008, 4096, False), (11008, 4096, True)):
        w = make_weight(out, in_, act)
        label = f"{out}x{in_} g128{' act' if act else ''}"
        out_bytes = out * in_ * 4
        base_s, base_peak, want = measure(partial(unblocked, w))
        rows = [("unblocked formula", base_s, base_peak)]
        blocked_s, blocked_peak, got = measure(w.dequantize)
        if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            raise SystemExit(f"{label}: blocked result differs from the formula")
        rows.append(("dequantize() fp32", blocked_s, blocked_peak))
        half_s, half_peak, _ = measure(partial(w.dequantize, np.float16))
        rows.append(("dequantize(float16)", half_s, half_peak))
        for name, seconds, peak in rows:
            print(f"{label:<24} {name:<22} {seconds:8.3f} {base_s / seconds:7.2f} {peak / out_bytes:9.2f}")


if __name__ == "__main__":
    main()
