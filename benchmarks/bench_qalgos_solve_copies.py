"""qalgos GPTQ's two copies around the column solve, each beside the formulation it replaced (issue 33).

* ``transposed copy``: the solve's float32 ``Wt [in, out]`` in visiting order from a bfloat16 ``W [out, in]``
  (:func:`qalgos.gptq.transposed_in_order`), beside widening ``W`` to float32 first and gathering its columns
  (``W.float()[:, perm].T.clone()``, what ``GPTQ._solve`` did before).
* ``stored dequantized``: the result's dense weight in bfloat16 (:func:`qalgos.result.stored_dequantized`),
  beside gathering the scales and zeros per column into a whole float32 result and converting it at the end.

Both pairs give the same bits (checked and printed). The shapes are the 8B-shaped layer's ``down_proj``
``[4096, 14336]`` and ``gate_proj``/``up_proj`` ``[14336, 4096]``; group-aware order, 4-bit g128. Process CPU
seconds (summed over threads), best of ``--repeats``; asserts nothing about time.

    python benchmarks/bench_qalgos_solve_copies.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from cpu_info import cpu_line
from qalgos.column_order import plan_columns
from qalgos.gptq import transposed_in_order
from qalgos.result import stored_dequantized
from qalgos.spec import QuantSpec
from qformats.logical import QuantizedWeight, default_g_idx

SHAPES = ((4096, 14336), (14336, 4096))


def best_cpu(repeats: int, fn, *args: object) -> float:
    """The least process CPU seconds of ``repeats`` calls of ``fn(*args)``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        value = fn(*args)
        best = min(best, time.process_time() - start)
        del value
    return best


def widened_then_gathered(weight: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The baseline copy: ``weight`` widened to float32, its columns gathered in ``perm`` order, transposed."""
    return weight.to(torch.float32)[:, perm].T.clone(memory_format=torch.contiguous_format)


def gathered_dequantized(weight: QuantizedWeight, dtype: torch.dtype) -> torch.Tensor:
    """The baseline: ``(code - zero) * scale`` with per-column gathered scales and zeros, float32, then ``dtype``."""
    codes = torch.from_numpy(weight.codes)
    g_idx = torch.from_numpy(weight.g_idx).to(torch.int64)
    scales = torch.from_numpy(np.ascontiguousarray(weight.scales.T, dtype=np.float32))
    zeros = torch.from_numpy(np.ascontiguousarray(weight.zeros.T, dtype=np.float32))
    result = codes.to(torch.float32)
    result.sub_(zeros.index_select(1, g_idx)).mul_(scales.index_select(1, g_idx))
    return result.to(dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_line()}; torch {torch.__version__}, {args.threads} threads")
    print("| step | weight [out, in] | before CPU s | after CPU s | ratio | same bits |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    rng = np.random.default_rng(0)
    spec = QuantSpec(bits=4, group_size=128, act_group_aware=True)
    for out, in_ in SHAPES:
        weight = torch.randn(out, in_, generator=torch.Generator().manual_seed(out)).to(torch.bfloat16)
        plan = plan_columns(torch.rand(in_, generator=torch.Generator().manual_seed(in_)) + 0.1, spec)
        dead = torch.zeros(in_, dtype=torch.bool)

        copies = ((widened_then_gathered, weight, plan.perm), (transposed_in_order, weight, plan, dead))
        same = torch.equal(copies[0][0](*copies[0][1:]), copies[1][0](*copies[1][1:]))
        b, a = (best_cpu(args.repeats, *call) for call in copies)
        print(f"| transposed copy | [{out}, {in_}] | {b:.3f} | {a:.3f} | {a / b:.2f} | {same} |")
        codes_t = rng.integers(0, 16, (in_, out), dtype=np.uint8)  # GPTQ's codes: a transposed view of the solve's
        logical = QuantizedWeight(
            codes=codes_t.T,
            scales=(rng.random((in_ // 128, out)) * 0.03 + 1e-4).astype(np.float16),
            zeros=np.full((in_ // 128, out), 8, np.int32),
            g_idx=default_g_idx(in_, 128).astype(np.int32),
            bits=4,
            group_size=128,
            sym=True,
        )
        like = torch.empty(0, dtype=torch.bfloat16)
        same = torch.equal(
            gathered_dequantized(logical, torch.bfloat16).view(torch.int16),
            stored_dequantized(logical, like).view(torch.int16),
        )
        b = best_cpu(args.repeats, gathered_dequantized, logical, torch.bfloat16)
        a = best_cpu(args.repeats, stored_dequantized, logical, like)
        print(f"| stored dequantized | [{out}, {in_}] | {b:.3f} | {a:.3f} | {a / b:.2f} | {same} |")


if __name__ == "__main__":
    main()
