"""Benchmark: reading compressed-tensors ``pack-quantized`` modules with qformats.

Run: ``python benchmarks/bench_qformats_compressed_tensors.py [--rows 4096 --cols 4096]``

For 3-, 4- and 8-bit group-128 asymmetric weights of ``rows x cols``: qformats' ``unpack`` of the module
tensors (codes, zero points, scales -> logical weight) and its float32 dequantization, against two
baselines measured in the same run: a plain copy of the packed words (memory bandwidth floor) and, when
``compressed-tensors`` is installed (the interop environment), compressed-tensors' own torch
``PackedQuantizationCompressor.decompress`` on the same tensors (unpack + dequantize to the scale dtype).
Seconds are the best of ``--repeat`` wall-clock runs. Nothing is asserted; the table is printed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx

GS = 128


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def make_weight(rows: int, cols: int, bits: int) -> QuantizedWeight:
    rng = np.random.default_rng(bits)
    groups = cols // GS
    return QuantizedWeight(
        codes=rng.integers(0, 1 << bits, (rows, cols)).astype(np.uint8),
        scales=(rng.random((groups, rows)) * 0.01 + 1e-3).astype(np.float16),
        zeros=rng.integers(0, 1 << bits, (groups, rows)).astype(np.int32),
        g_idx=default_g_idx(cols, GS),
        bits=bits,
        group_size=GS,
        sym=False,
    )


def ct_baseline(tensors: dict[str, np.ndarray], bits: int) -> Callable[[], object] | None:
    try:
        import torch
        from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    except ImportError:
        return None
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=False, strategy="group", group_size=GS)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
    return lambda: PackedQuantizationCompressor.decompress(state, scheme)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    a = parser.parse_args()
    layout = get_layout("pack-quantized")
    print(f"pack-quantized read, {a.rows}x{a.cols}, group {GS}, asymmetric; best of {a.repeat}")
    header = f"{'bits':>4} | {'copy words s':>12} | {'qformats unpack s':>17} | {'+dequant s':>10} | "
    header += f"{'compressed-tensors s':>20} | {'ours/ct':>7} | {'ours/copy':>9}"
    print(header)
    print("-" * len(header))
    for bits in (3, 4, 8):
        weight = make_weight(a.rows, a.cols, bits)
        tensors = layout.pack(weight)
        meta = LayoutMeta(bits, GS, a.cols, a.rows, False)
        copy_s = best(lambda t=tensors: {k: v.copy() for k, v in t.items()}, a.repeat)
        unpack_s = best(lambda t=tensors, m=meta: layout.unpack(t, m), a.repeat)
        full_s = best(lambda t=tensors, m=meta: layout.unpack(t, m).dequantize(), a.repeat)
        ct = ct_baseline(tensors, bits)
        ct_s = best(ct, a.repeat) if ct is not None else float("nan")
        ct_text = f"{ct_s:20.4f}" if ct is not None else f"{'not installed':>20}"
        ratio = f"{full_s / ct_s:7.2f}" if ct is not None else f"{'-':>7}"
        print(
            f"{bits:>4} | {copy_s:12.4f} | {unpack_s:17.4f} | {full_s:10.4f} | {ct_text} | {ratio} | "
            f"{full_s / copy_s:9.1f}"
        )


if __name__ == "__main__":
    main()
