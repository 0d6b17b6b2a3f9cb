"""CPU int4 linear: microseconds per call of qkernels backends beside dense nn.Linear, in one run.

Layer 4096x4096, int4, group 128, asymmetric zeros; batch 1 and 32; float32 and bfloat16 activations;
1 and 2 threads. Each cell is the minimum over repeated timed calls (robust to a shared, noisy host)
with the median beside it; ratios are against dense nn.Linear of the same activation dtype measured in
the same process. Asserts nothing about time. Run: ``python benchmarks/bench_qkernels_int4_cpu.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from qkernels import quant_linear_from_weight
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per cell")
    args = parser.parse_args()
    n = k = args.size
    case = LayerCase("gptq_v2", 4, 128, False, n, k)
    weight = make_weight(case)
    dense32 = torch.nn.Linear(k, n, bias=False)
    with torch.no_grad():
        dense32.weight.copy_(torch.from_numpy(weight.dequantize()))
    dense16 = torch.nn.Linear(k, n, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        dense16.weight.copy_(dense32.weight.to(torch.bfloat16))
    modules = {}
    for dtype in (torch.float32, torch.bfloat16):
        for name in ("cpu_int4", "aten_int4"):
            modules[(name, dtype)] = quant_linear_from_weight(weight, "gptq_v2", backend=name, dtype=dtype)
        modules[("torch+cache", dtype)] = quant_linear_from_weight(
            weight, "gptq_v2", backend="torch", dtype=dtype, cache_dense=True
        )
    print(f"qkernels int4 CPU linear {n}x{k} g128 asym; ratios = dense nn.Linear (same dtype) / candidate")
    print(f"host: {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    print(
        f"{'threads':>7} {'batch':>5} {'act':>8} {'candidate':>14} {'wall us min (median)':>22} "
        f"{'vs dense':>9} {'cpu us min':>11} {'vs dense':>9}"
    )
    with torch.inference_mode():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for batch in (1, 32):
                for dtype in (torch.float32, torch.bfloat16):
                    x = torch.randn(batch, k).to(dtype)
                    dense = dense32 if dtype == torch.float32 else dense16
                    base, base_med, base_cpu = measure(lambda d=dense, x=x: d(x), args.budget)
                    rows = [("dense nn.Linear", base, base_med, base_cpu)]
                    for name in ("cpu_int4", "aten_int4", "torch+cache"):
                        mod = modules[(name, dtype)]
                        rows.append((name, *measure(lambda m=mod, x=x: m(x), args.budget)))
                    for name, best, med, cpu in rows:
                        cell = f"{best:10.0f} ({med:8.0f})"
                        print(
                            f"{threads:>7} {batch:>5} {str(dtype)[6:]:>8} {name:>15} {cell:>22} "
                            f"{base / best:>8.2f}x {cpu:>11.0f} {base_cpu / max(cpu, 1.0):>8.2f}x"
                        )


if __name__ == "__main__":
    main()
