"""AWQ's inspected-block scale search at the 8B MLP shape: fresh temporaries, scratch trials, and the recycled heap.

The gate/up search replays the MLP (``down(silu(gate(x)) * up(x))``, hidden 4096, intermediate 14336, bfloat16)
once per grid ratio on the recorded calls (``--tokens`` in calls of 512), the way qlooper's AWQ processor does:
each trial is copied into the block's weights, the outputs are gathered in float32 and scored against the
reference in float64. Three ways of running the same search, one after another in this process, with glibc's
mmap threshold pinned at 128 KiB as the loop pins it (``qlooper.allocator``):

* ``fresh``: as before issue 33's page work: a new float32 trial per ratio, a bfloat16 copy of it for the block,
  a new float64 difference per loss;
* ``scratch``: trials and the loss's difference rewritten in ``ScratchBuffers``, each trial copied (and converted)
  straight into the block's weights;
* ``scratch + recycled heap``: the same inside ``qlooper.allocator.recycled_heap()``, so the forwards'
  activations (``[512, 14336]`` per call) and the gathered outputs reuse the previous ratio's pages.

Columns: process user and system CPU seconds and minor page faults (``getrusage``), and the peak resident set
above the one at the start of the step (``VmHWM`` after resetting it through ``/proc/self/clear_refs``; Linux).
Every way gives the same ratio, loss and scales (checked and printed). Asserts nothing about time.

    python benchmarks/bench_awq_search_pages.py [--tokens 4096] [--grid 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import resource
from collections.abc import Callable
from typing import Any

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # torch's huge-page allocation, as the lowbit command sets it

import torch
from cpu_info import cpu_line
from peak_memory import peak_rss_bytes, reset_peak, rss_bytes
from qalgos import awq
from qalgos.scratch_buffers import ScratchBuffers
from qalgos.spec import QuantSpec
from qlooper.allocator import pin_mmap_threshold, recycled_heap

SPEC = QuantSpec(bits=4, group_size=128, desc_act=False, act_group_aware=False)
HIDDEN, INTERMEDIATE, CALL_TOKENS = 4096, 14336, 512


def measured(fn: Callable[[], Any]) -> tuple[Any, float, float, int, float]:
    """``fn()``'s value, user and system CPU s, minor faults and peak RSS above the start (GiB) while it ran."""
    start = rss_bytes()
    reset_peak()
    before = resource.getrusage(resource.RUSAGE_SELF)
    value = fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (
        value,
        after.ru_utime - before.ru_utime,
        after.ru_stime - before.ru_stime,
        after.ru_minflt - before.ru_minflt,
        (peak_rss_bytes() - start) / 2**30,
    )


class Block:
    """The MLP with its own bfloat16 ``gate``, ``up`` and ``down`` weights and the recorded calls ``[512, 4096]``."""

    def __init__(self, gen: torch.Generator, tokens: int) -> None:
        self.gate = (torch.randn(INTERMEDIATE, HIDDEN, generator=gen) * 0.02).to(torch.bfloat16)
        self.up = (torch.randn(INTERMEDIATE, HIDDEN, generator=gen) * 0.02).to(torch.bfloat16)
        self.down = (torch.randn(HIDDEN, INTERMEDIATE, generator=gen) * 0.02).to(torch.bfloat16)
        x = torch.randn(tokens, HIDDEN, generator=gen) * (torch.rand(HIDDEN, generator=gen) * 2)
        self.calls = list(x.to(torch.bfloat16).split(CALL_TOKENS))

    def forward_with(self, convert_first: bool) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        def run(weights: list[torch.Tensor]) -> torch.Tensor:
            for mine, w in zip((self.gate, self.up), weights, strict=True):
                mine.copy_(w.to(mine.dtype) if convert_first else w)
            outs = [
                torch.nn.functional.linear(
                    torch.nn.functional.silu(torch.nn.functional.linear(c, self.gate))
                    * torch.nn.functional.linear(c, self.up),
                    self.down,
                )
                for c in self.calls
            ]
            return torch.cat([o.to(torch.float32) for o in outs], dim=0)

        return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--grid", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pinned = pin_mmap_threshold()
    print(
        f"{cpu_line()}; torch {torch.__version__}, {args.threads} threads, {args.tokens} tokens, grid {args.grid}, "
        f"mmap threshold pinned: {pinned}"
    )
    block = Block(torch.Generator().manual_seed(0), args.tokens)
    originals = [block.gate.clone(), block.up.clone()]
    weights = [w.to(torch.float32) for w in originals]
    x = torch.cat(block.calls)

    def search(scratch: ScratchBuffers | None, convert_first: bool) -> awq.ScaleSearchResult:
        try:
            return awq.search_scales(x, weights, block.forward_with(convert_first), SPEC, args.grid, scratch=scratch)
        finally:
            block.gate.copy_(originals[0])
            block.up.copy_(originals[1])

    def recycled() -> awq.ScaleSearchResult:
        with recycled_heap():
            return search(ScratchBuffers(), False)

    runs = [
        ("fresh", measured(lambda: search(None, True))),
        ("scratch", measured(lambda: search(ScratchBuffers(), False))),
        ("scratch + recycled heap", measured(recycled)),
    ]
    base = runs[0][1]
    print("| way | user / sys CPU s | faults | peak above start GiB | CPU ratio | same result |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, (found, user, system, faults, peak) in runs:
        same = found.ratio == base[0].ratio and found.loss == base[0].loss and torch.equal(found.scales, base[0].scales)
        ratio = (user + system) / (base[1] + base[2])
        print(f"| {name} | {user:.1f} / {system:.1f} | {faults:,} | {peak:.2f} | {ratio:.2f} | {same} |")


if __name__ == "__main__":
    main()
