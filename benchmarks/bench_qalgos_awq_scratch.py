"""AWQ's per-step temporaries in reused scratch tensors, beside fresh ones, at the 8B shape (issue 33).

Each step runs twice in this process: with ``ScratchBuffers(reuse=False)`` (a fresh tensor at every step, the
allocation pattern the search had before) and with the default reused scratch; for ``quantize_awq`` the baseline
is its former composition (``apply_clip``, ``quantize_groups`` per group, ``build_logical``, the loss). Every
pair gives the same bits (checked and printed). Columns: process user and system CPU seconds (summed over
threads) and minor page faults, from ``getrusage``. On the virtual machines this project runs on, a fresh page
costs far more than writing it (a fresh 1.6 GB tensor: about 12 s of system CPU to fill, 0.0 s the second time),
which is what reuse saves; on bare metal the difference is smaller. Asserts nothing about time.

    python benchmarks/bench_qalgos_awq_scratch.py [--tokens 4096] [--threads 2]

Shapes: ``gate_proj`` ``[14336, 4096]`` (clip search on 512 strided tokens, quantization with its clip) and
``down_proj`` ``[4096, 14336]`` (the Gram-form scale search, every tier), AWQ 4-bit g128, float32 weights,
``--tokens`` calibration tokens (4096: 8 rows of 512).
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from cpu_info import cpu_line
from qalgos.awq import quantize_awq
from qalgos.awq_clip import apply_clip, search_clip
from qalgos.awq_gram import search_scales_gram
from qalgos.group_params import awq_params
from qalgos.result import build_logical, stored_dequantized
from qalgos.rtn import natural_g_idx, quantize_groups
from qalgos.scratch_buffers import ScratchBuffers
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=128, desc_act=False, act_group_aware=False)


def measured(fn: Callable[[], Any]) -> tuple[Any, float, float, int]:
    """``fn()``'s value, user and system CPU seconds and minor page faults of this process while it ran."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    value = fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return value, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, after.ru_minflt - before.ru_minflt


def former_quantize_awq(weight: torch.Tensor, clip: torch.Tensor) -> tuple[Any, torch.Tensor, float]:
    """``quantize_awq``'s former composition: a clamped copy, per-group codes, then the loss on fresh tensors."""
    w = weight.to(torch.float32)
    codes, scales, zeros, _ = quantize_groups(apply_clip(w, clip, SPEC), SPEC, awq_params)
    logical = build_logical(codes, scales, zeros, natural_g_idx(w.shape[1], SPEC), SPEC, {"algorithm": "awq"})
    deq = stored_dequantized(logical, w)
    return logical, deq, float(((deq - w) ** 2).mean())


def row(step: str, shape: tuple[int, int], base: tuple[Any, ...], new: tuple[Any, ...], same: bool) -> str:
    return (
        f"| {step} | {list(shape)} | {base[1]:.1f} / {base[2]:.1f} | {base[3]:,} | {new[1]:.1f} / {new[2]:.1f} | "
        f"{new[3]:,} | {(new[1] + new[2]) / (base[1] + base[2]):.2f} | {same} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_line()}; torch {torch.__version__}, {args.threads} threads, {args.tokens} tokens")
    print("| step | weight [out, in] | fresh: user / sys CPU s | fresh: faults | reused: user / sys CPU s "
          "| reused: faults | CPU ratio | same bits |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    gen = torch.Generator().manual_seed(0)
    gate = torch.randn(14336, 4096, generator=gen) * 0.02
    x = torch.randn(args.tokens, 4096, generator=gen) * (torch.rand(4096, generator=gen) * 2)
    base = measured(lambda: search_clip(gate, x, SPEC, scratch=ScratchBuffers(reuse=False)))
    new = measured(lambda: search_clip(gate, x, SPEC))
    print(row("clip search", (14336, 4096), base, new, torch.equal(base[0], new[0])))
    clip = new[0]
    base = measured(lambda: former_quantize_awq(gate, clip))
    new = measured(lambda: quantize_awq(gate, SPEC, clip=clip))
    logical, deq, loss = base[0]
    same = (
        all(np.array_equal(getattr(logical, f), getattr(new[0].weight, f)) for f in ("codes", "scales", "zeros"))
        and torch.equal(deq, new[0].dequantized)
        and loss == new[0].loss
    )
    print(row("quantize (clipped)", (14336, 4096), base, new, same))
    down = torch.randn(4096, 14336, generator=gen) * 0.02
    x = torch.randn(args.tokens, 14336, generator=gen) * (torch.rand(14336, generator=gen) * 2)
    base = measured(lambda: search_scales_gram(x, [down], SPEC, scratch=ScratchBuffers(reuse=False)))
    new = measured(lambda: search_scales_gram(x, [down], SPEC))
    same = base[0].ratio == new[0].ratio and base[0].loss == new[0].loss and torch.equal(base[0].scales, new[0].scales)
    print(row("Gram scale search", (4096, 14336), base, new, same))


if __name__ == "__main__":
    main()
