"""Benchmark: lossless transcodes and streamed checkpoint dequantization in qformats.

Run: ``.venv/bin/python benchmarks/bench_qformats_transcode.py [--size-mb 1024]``

1. Transcode one 4096x11008 (in x out) 4-bit group-128 weight GPTQ (v2) -> AWQ GEMM and GPTQ -> Marlin
   with ``qformats.transcode``. Baseline, measured in the same run: packing the same codes into AWQ GEMM
   words with the column loop of the AWQ reference writer (one masked OR per output column).
2. Dequantize a sharded GPTQ checkpoint of about ``--size-mb`` MB of tensors. Streamed:
   ``iter_dense_tensors`` (shard by shard, memory-mapped). Baseline: load every tensor of every shard
   first, then dequantize module by module (what a naive loader does).

Seconds are wall time; peak memory is the peak of Python/numpy allocations seen by ``tracemalloc``.
Nothing is asserted; the table is printed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from qformats.checkpoint import Checkpoint, iter_dense_tensors, write_checkpoint
from qformats.logical import QuantizedWeight, default_g_idx
from qformats.transcode import transcode, transcode_weight

IN, OUT, BITS, GS = 4096, 11008, 4, 128


def measure(fn: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak MiB) of one call."""
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20


def make_weight(rng: np.random.Generator, out: int, in_: int) -> QuantizedWeight:
    groups = in_ // GS
    return QuantizedWeight(
        codes=rng.integers(0, 16, (out, in_), dtype=np.uint8),
        scales=(rng.random((groups, out)) * 0.01 + 1e-3).astype(np.float16),
        zeros=np.full((groups, out), 8, np.int32),
        g_idx=default_g_idx(in_, GS),
        bits=BITS,
        group_size=GS,
        sym=True,
    )


def reference_awq_gemm_loop(codes: np.ndarray) -> np.ndarray:
    """The AWQ reference writer's packing loop: for every word column, OR in 8 order-mapped columns."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    intweight = codes.T.astype(np.int32)  # [in, out]
    qweight = np.zeros((intweight.shape[0], intweight.shape[1] // 8), dtype=np.int32)
    for col in range(intweight.shape[1] // 8):
        for i in range(8):
            qweight[:, col] |= intweight[:, col * 8 + order[i]] << (i * 4)
    return qweight


def bench_transcode(rows: list[tuple[str, float, float, str]]) -> None:
    w = make_weight(np.random.default_rng(0), OUT, IN)
    src = transcode_weight(w, "gptq_v2")
    s, m = measure(lambda: reference_awq_gemm_loop(w.codes))
    rows.append(("baseline: AWQ reference pack loop (codes -> gemm)", s, m, "1.00x"))
    base = s
    for dst in ("gemm", "marlin"):
        s, m = measure(lambda dst=dst: transcode(src.tensors, from_="gptq_v2", to=dst, meta=src.meta))
        rows.append((f"transcode gptq_v2 -> {dst} (verified)", s, m, f"{base / s:.2f}x speed"))
        s, m = measure(lambda dst=dst: transcode(src.tensors, from_="gptq_v2", to=dst, meta=src.meta, verify=False))
        rows.append((f"transcode gptq_v2 -> {dst} (verify=False)", s, m, f"{base / s:.2f}x speed"))


def build_checkpoint(root: Path, size_mb: int) -> int:
    rng = np.random.default_rng(1)
    w = make_weight(rng, OUT, IN)
    tensors = transcode_weight(w, "gptq_v2").tensors
    per_module = sum(a.nbytes for a in tensors.values())
    modules = max(1, round(size_mb * 2**20 / per_module))

    def pairs():
        for i in range(modules):
            for name, arr in tensors.items():
                yield f"model.layers.{i}.mlp.up_proj.{name}", arr

    config = {"bits": BITS, "group_size": GS, "sym": True, "quant_method": "gptq", "format": "gptq_v2"}
    write_checkpoint(root, pairs(), quantize_config=config, max_shard_size="256MB", validate=False)
    return modules


def eager_dequantize(root: Path) -> None:
    ck = Checkpoint(root)
    everything = {name: ck.load(name) for name in ck.weight_map}
    for entry in ck.modules():
        data = {suffix: everything[name] for suffix, name in entry.tensors.items()}
        ck.unpack(entry, data).dequantize().astype(np.float16)


def streamed_dequantize(root: Path) -> None:
    for _ in iter_dense_tensors(Checkpoint(root)):
        pass


def bench_dequantize(rows: list[tuple[str, float, float, str]], size_mb: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ck"
        modules = build_checkpoint(root, size_mb)
        total = Checkpoint(root).total_size() / 2**20
        s_base, m_base = measure(lambda: eager_dequantize(root))
        rows.append(
            (f"baseline: load all then dequantize ({total:.0f} MiB, {modules} modules)", s_base, m_base, "1.00x")
        )
        s, m = measure(lambda: streamed_dequantize(root))
        ratio = f"{s_base / s:.2f}x speed, {m_base / m:.1f}x less memory"
        rows.append((f"streamed iter_dense_tensors ({total:.0f} MiB)", s, m, ratio))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="tensor bytes of the sharded checkpoint")
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []
    bench_transcode(rows)
    bench_dequantize(rows, args.size_mb)
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'seconds':>8}  {'peak MiB':>9}  vs baseline")
    for name, seconds, mib, ratio in rows:
        print(f"{name:<{width}}  {seconds:8.3f}  {mib:9.1f}  {ratio}")


if __name__ == "__main__":
    main()
