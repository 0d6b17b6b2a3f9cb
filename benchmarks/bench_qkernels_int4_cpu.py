"""CPU int4 linear: microseconds per call of qkernels backends beside dense nn.Linear, in one run.

Layers ``[out, in]`` (default: the Llama 2048/5632 projections 2048x2048, 5632x2048, 2048x5632), int4
GPTQ (v1 ``gptq`` checkpoint tensors, built through ``quant_linear`` as qhf's loader does), group 128,
asymmetric zeros; batch 1 (decode) and 32 (prefill); float32 and bfloat16 activations; 1 and 2 threads.
Each cell is the minimum over repeated timed calls (robust to a shared, noisy host) with the median
beside it; ratios are against dense nn.Linear of the same activation dtype measured in the same process.
The bytes each module holds in buffers are printed beside the packed size ``out * in / 2``.

Decode bandwidth: for batch 1, each ``cpu_int4`` row also prints the bytes one call must read (codes,
float32 scales and zeros) divided by the copy bandwidth of a 256 MiB ``torch`` tensor copy measured in this
process at the same thread count (bytes read + written per second): the time one call would take at that
bandwidth, and the measured call's share of it (100% = at the limit; above 100% means the weight was served
from cache, which happens in this loop for weights that fit the host's L3). Asserts nothing about time.

    python benchmarks/bench_qkernels_int4_cpu.py [--shapes 4096x4096] [--issue]

``--issue`` runs issue 22's grid: shapes 1536x576, 576x1536, 2048x2048, 4096x4096; 1, 2, 4, 8, 16, 24, 32,
64, 128, 256 and 512 tokens; float32; 1 then 2 threads. Per cell it times dense ``F.linear`` and each
``cpu_int4`` path forced (decode kernel, fused kernel, dequantized tiles + ``at::mm``) and the automatic
choice, alternating rounds in one process, and prints dense CPU time / path CPU time (above 1.00 = faster
than dense; the best per-call process CPU time of each, so load from other processes on a shared host
weighs less; with more than one thread, process CPU time also counts the library GEMM's OpenMP threads
spinning while they wait, so the last column gives dense wall time / automatic-choice wall time), then the
batch-1 decode rows against the copy bandwidth.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from qkernels import quant_linear
from qkernels.checkpoint import pack_weight
from qkernels.testing.cases import LayerCase, make_weight


def measure(fn: Callable[[], object], budget_s: float) -> tuple[float, float, float]:
    """(wall min, wall median, process CPU min) microseconds per call: two warm-up calls, then calls until
    ``budget_s`` (at least 3). Process CPU time sums every thread; on a shared host it is the steadier figure."""
    fn()
    fn()
    walls: list[float] = []
    cpus: list[float] = []
    start = time.perf_counter()
    while len(walls) < 3 or (time.perf_counter() - start < budget_s and len(walls) < 200):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls) * 1e6, statistics.median(walls) * 1e6, min(cpus) * 1e6


def copy_bandwidth(mib: int = 256) -> float:
    """Bytes per second (read + written) of the best of five ``mib`` MiB float32 tensor copies."""
    src = torch.ones(mib * 2**18)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def _cold_decode(tensors: dict, meta: object, x: torch.Tensor, nbytes: int, budget_s: float) -> float:
    """Best microseconds per batch-1 call over distinct copies of one layer, called in turn, whose weights
    total at least 96 MiB (more than this host's 32 MiB L3), so each call reads its weight from memory."""
    copies = max(2, -(-96 * 2**20 // nbytes))
    mods = [
        quant_linear("gptq", {k: v.copy() for k, v in tensors.items()}, meta, backend="cpu_int4") for _ in range(copies)
    ]
    best = float("inf")
    start = time.perf_counter()
    while best == float("inf") or time.perf_counter() - start < budget_s:
        for mod in mods:
            t0 = time.perf_counter()
            mod(x)
            best = min(best, time.perf_counter() - t0)
    return best * 1e6


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="2048x2048,5632x2048,2048x5632", help="comma-separated OUTxIN")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--backends", default="cpu_int4,aten_int4,torch+cache")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per cell")
    parser.add_argument("--issue", action="store_true", help="issue 22's grid (see the module docstring)")
    parser.add_argument("--rounds", type=int, default=5, help="--issue: alternating rounds per cell")
    args = parser.parse_args()
    if args.issue:
        if args.shapes == parser.get_default("shapes"):
            args.shapes = "1536x576,576x1536,2048x2048,4096x4096"
        if args.batches == parser.get_default("batches"):
            args.batches = "1,2,4,8,16,24,32,64,128,256,512"
        _issue_grid(args)
        return
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    backends = args.backends.split(",")
    print("qkernels int4 CPU linear, gptq g128 asym; ratios = dense nn.Linear (same dtype) / candidate")
    print(f"host: {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        _bench_shape(n, k, dtypes, backends, args)


_PATHS = {  # cpu_int4 options that force one path whatever the row count
    "decode": {"dequant_from": 10**9, "tiles_from": 10**9},
    "fused": {"dequant_from": 1, "tiles_from": 10**9},
    "tiles": {"dequant_from": 1, "tiles_from": 1},
    "auto": {},
}


def _alternate(
    fns: dict[str, Callable[[], object]], rounds: int, budget_s: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Best process CPU and best wall microseconds per call of each function, timed in ``rounds`` alternating
    rounds of about ``budget_s`` seconds per function (each round calls every function in turn)."""
    cpu = dict.fromkeys(fns, float("inf"))
    wall = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            start, calls = time.perf_counter(), 0
            c0 = time.process_time()
            while calls == 0 or time.perf_counter() - start < budget_s:
                fn()
                calls += 1
            cpu[name] = min(cpu[name], (time.process_time() - c0) / calls)
            wall[name] = min(wall[name], (time.perf_counter() - start) / calls)
    return {n: t * 1e6 for n, t in cpu.items()}, {n: t * 1e6 for n, t in wall.items()}


def _issue_grid(args: argparse.Namespace) -> None:
    """Issue 22's grid: dense / path CPU-time ratios per shape and token count, then the decode bandwidth."""
    shapes = [tuple(int(v) for v in shape.lower().split("x")) for shape in args.shapes.split(",")]
    batches = _ints(args.batches)
    layers = {}
    for n, k in shapes:
        weight = make_weight(LayerCase("gptq", 4, 128, False, n, k))
        tensors, meta = pack_weight(weight, "gptq")
        dense = torch.from_numpy(weight.dequantize()).float().contiguous()
        mods = {path: quant_linear("gptq", tensors, meta, backend="cpu_int4", **opts) for path, opts in _PATHS.items()}
        layers[(n, k)] = (dense, mods, tensors, meta)
    isa = next(iter(layers.values()))[1]["auto"].isa
    print(f"qkernels cpu_int4 by path vs dense F.linear, gptq g128 asym, float32; fused kernel ISA {isa}")
    print(f"host: {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}; cells: dense CPU time / ")
    print("path CPU time (best per call over alternating rounds); shapes " + " / ".join(f"{n}x{k}" for n, k in shapes))
    with torch.inference_mode():
        for threads in _ints(args.threads):
            torch.set_num_threads(threads)
            print(f"\n{threads} thread(s), load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
            print(f"| tokens | {' | '.join(_PATHS)} | chosen | auto by wall time |")
            print(f"| --- |{' --- |' * len(_PATHS)} --- | --- |")
            for batch in batches:
                cells: dict[str, list[str]] = {path: [] for path in _PATHS}
                chosen, walls = [], []
                for n, k in shapes:
                    dense, mods, _, _ = layers[(n, k)]
                    x = torch.randn(batch, k)
                    fns: dict[str, Callable[[], object]] = {"dense": lambda x=x, d=dense: F.linear(x, d)}
                    fns.update({path: (lambda m=mod, x=x: m(x)) for path, mod in mods.items()})
                    times, wall = _alternate(fns, args.rounds, min(args.budget, 0.1))
                    for path in _PATHS:
                        cells[path].append(f"{times['dense'] / times[path]:.2f}")
                    chosen.append(mods["auto"].path_for(batch))
                    walls.append(f"{wall['dense'] / wall['auto']:.2f}")
                row = " | ".join(" / ".join(cells[path]) for path in _PATHS)
                print(f"| {batch} | {row} | {'/'.join(dict.fromkeys(chosen))} | {' / '.join(walls)} |", flush=True)
            bandwidth = copy_bandwidth()
            for n, k in shapes:
                dense, mods, tensors, meta = layers[(n, k)]
                x = torch.randn(1, k)
                decode_bytes = n * k // 2 + 2 * 4 * (-(-k // 128)) * n
                best = measure(lambda m=mods["auto"], x=x: m(x), args.budget)[0]
                cold = _cold_decode(tensors, meta, x, decode_bytes, args.budget)
                print(f"[{n}x{k}] {_bandwidth_line(decode_bytes, bandwidth, threads, best, cold)}")


def _bandwidth_line(decode_bytes: int, bandwidth: float, threads: int, best: float, cold: float) -> str:
    """How close one decode call (``best`` us cache-warm, ``cold`` us from beyond the L3) comes to reading
    its ``decode_bytes`` at the measured copy ``bandwidth`` (bytes/s)."""
    limit = decode_bytes / bandwidth * 1e6
    return (
        f"decode reads {decode_bytes / 2**20:.2f} MiB/call; copy bandwidth {bandwidth / 1e9:.1f} GB/s "
        f"({threads} thr) -> limit {limit:.0f} us; best call {best:.0f} us = {100 * limit / best:.0f}% of the "
        f"limit speed (cache-warm), {cold:.0f} us = {100 * limit / cold:.0f}% when rotating copies larger than the L3"
    )


def _bench_shape(n: int, k: int, dtypes: list[torch.dtype], backends: list[str], args: argparse.Namespace) -> None:
    weight = make_weight(LayerCase("gptq", 4, 128, False, n, k))
    tensors, meta = pack_weight(weight, "gptq")
    dense = {torch.float32: torch.nn.Linear(k, n, bias=False)}
    with torch.no_grad():
        dense[torch.float32].weight.copy_(torch.from_numpy(weight.dequantize()))
    for dtype in dtypes:
        if dtype != torch.float32:
            dense[dtype] = torch.nn.Linear(k, n, bias=False).to(dtype)
            with torch.no_grad():
                dense[dtype].weight.copy_(dense[torch.float32].weight.to(dtype))
    modules = {}
    for dtype in dtypes:
        for name in backends:
            backend, options = ("torch", {"cache_dense": True}) if name == "torch+cache" else (name, {})
            modules[(name, dtype)] = quant_linear("gptq", tensors, meta, backend=backend, dtype=dtype, **options)
    print(f"\n[{n}x{k}] packed codes {n * k / 2 / 2**20:.2f} MiB; held in buffers:", end="")
    for name in backends:
        held = sum(b.numel() * b.element_size() for b in modules[(name, dtypes[0])].buffers())
        print(f" {name} {held / 2**20:.2f} MiB", end="")
    print()
    print(
        f"{'threads':>7} {'batch':>5} {'act':>8} {'candidate':>15} {'wall us min (median)':>22} "
        f"{'vs dense':>9} {'cpu us min':>11} {'vs dense':>9}"
    )
    groups = -(-k // 128)
    decode_bytes = n * k // 2 + 2 * 4 * groups * n  # codes + float32 scales and zeros
    with torch.inference_mode():
        for threads in _ints(args.threads):
            torch.set_num_threads(threads)
            bandwidth = copy_bandwidth()
            for batch in _ints(args.batches):
                for dtype in dtypes:
                    x = torch.randn(batch, k).to(dtype)
                    base, base_med, base_cpu = measure(lambda d=dense[dtype], x=x: d(x), args.budget)
                    rows = [("dense nn.Linear", base, base_med, base_cpu)]
                    for name in backends:
                        mod = modules[(name, dtype)]
                        rows.append((name, *measure(lambda m=mod, x=x: m(x), args.budget)))
                    for name, best, med, cpu in rows:
                        cell = f"{best:10.0f} ({med:8.0f})"
                        print(
                            f"{threads:>7} {batch:>5} {str(dtype)[6:]:>8} {name:>15} {cell:>22} "
                            f"{base / best:>8.2f}x {cpu:>11.0f} {base_cpu / max(cpu, 1.0):>8.2f}x"
                        )
                        if batch == 1 and name == "cpu_int4":
                            cold = _cold_decode(tensors, meta, x, decode_bytes, args.budget)
                            print(f"{'':>7} {_bandwidth_line(decode_bytes, bandwidth, threads, best, cold)}")


if __name__ == "__main__":
    main()
