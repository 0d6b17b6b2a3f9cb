"""One ``down_proj``-shaped AWQ scale search (Gram form): every ratio in float64 against the tiered searches
(float32 then float64; bfloat16 then float32 then float64), CPU and wall seconds side by side.

Weights ``[--out, --in]`` (random normal x 0.02, rounded to bfloat16 and held in float32, as the AWQ processor
passes them) and ``--rows`` x ``--length`` recorded inputs (bfloat16, held in float32) with ``--threads`` torch
threads; AWQ 4-bit g128. ``--inputs random``: standard normal inputs (a flat loss curve: the 20 ratios' losses
within about 0.2% of each other); ``--inputs outlier``: the same with 1% of the channels 30x larger and every
channel scaled by a uniform [0, 2) factor, their weight columns 5x smaller (a steep curve, as real activations
with outlier channels give). Each variant runs in its own subprocess of this tree, builds the same seeded data and
times ``qalgos.awq_gram.search_scales_gram`` alone (process CPU and wall seconds, and the process's peak RSS):
``float64`` with ``rescore=False`` (every grid ratio scored in float64, the search before issue 33's change and
the baseline), ``float32`` with ``rescore=True, bfloat16=False`` (every ratio in float32, the near-best in
float64: the default before the bfloat16 tier), ``bfloat16`` with ``rescore=True, bfloat16=True`` (every ratio in
bfloat16, the near-best in float32, theirs in float64: the default on a CPU with native bfloat16); each of the
last two scores its float32 tier through the Gram matrix's Cholesky factor where that pays, and its ``-gram``
twin (``factor=False``) through the Gram matrix itself, as before the factor form. Printed: a
table (variant, CPU s, wall s, CPU/wall, ratio to the baseline, chosen ratio, the bfloat16/float32/float64 losses
computed, whether the chosen ratio and its float64 loss bits equal the baseline's, peak RSS, load).

``--stages``: instead, one grid ratio's work split into its steps (trial weights, the bfloat16, float32 and float64
products and sums), each timed on its own with the busiest thread's share of its CPU seconds (per-thread
counters of ``/proc/self/task``: 1.0 means one thread did the step, 0.5 an even split over two, whatever the load).

Run: ``python benchmarks/bench_awq_scale_search.py`` (the defaults, out 1024, in 4096, 16 x 512 rows: about a
minute); the Llama-3-8B ``down_proj``, ``--out 4096 --in 14336 --rows 32 --length 512``, takes about 15 minutes
for the float64 variant on a quiet 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cpu_info import cpu_line  # noqa: E402
from peak_memory import peak_rss_bytes  # noqa: E402
from thread_cpu import busiest_share, thread_cpu  # noqa: E402

#: variant -> search_scales_gram's ``(rescore, bfloat16, factor)``
VARIANTS = {
    "float64": (False, False, False),
    "float32-gram": (True, False, False),
    "float32": (True, False, True),
    "bfloat16-gram": (True, True, False),
    "bfloat16": (True, True, True),
}


def problem(args: argparse.Namespace):
    """The seeded weights ``[out, in]`` and inputs ``[rows * length, in]`` (both float32 holding bfloat16 values)."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    weight = (torch.randn(args.out, args.in_, generator=gen) * 0.02).to(torch.bfloat16).to(torch.float32)
    x = torch.randn(args.rows * args.length, args.in_, generator=gen)
    if args.inputs == "outlier":
        channels = torch.randperm(args.in_, generator=gen)[: max(1, args.in_ // 100)]
        x[:, channels] *= 30.0
        x *= torch.rand(args.in_, generator=gen) * 2.0
        weight[:, channels] *= 0.2
        weight = weight.to(torch.bfloat16).to(torch.float32)
    return weight, x.to(torch.bfloat16).to(torch.float32)


def timed(fn):
    """``(result, cpu s, wall s)`` of ``fn()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def child(args: argparse.Namespace) -> None:
    import qalgos
    import torch
    from qalgos.awq_gram import search_scales_gram
    from qalgos.spec import QuantSpec

    torch.set_num_threads(args.threads)
    spec = QuantSpec(bits=4, group_size=128, sym=False)
    weight, x = problem(args)
    counts: list = []
    rescore, bfloat16, factor = VARIANTS[args.variant]
    found, cpu, wall = timed(
        lambda: search_scales_gram(x, [weight], spec, rescore=rescore, counts=counts, bfloat16=bfloat16, factor=factor)
    )
    print(
        json.dumps(
            {
                "src": str(Path(qalgos.__file__).parent),
                "threads": torch.get_num_threads(),
                "cpu_s": cpu,
                "wall_s": wall,
                "ratio": found.ratio,
                "loss": float(found.loss).hex(),
                "bfloat16": counts[0].bfloat16 if counts else 0,
                "float32": counts[0].float32 if counts else 0,
                "float64": counts[0].float64 if counts else 20,
                "fell_back": bool(counts and (counts[0].fell_back or counts[0].bfloat16_fell_back)),
                "estimate": counts[0].estimate if counts else None,
                "bfloat16_estimate": counts[0].bfloat16_estimate if counts else None,
                "peak_gib": peak_rss_bytes() / 2**30,
                "load": os.getloadavg()[0],
            }
        )
    )


def stages(args: argparse.Namespace) -> None:
    """One ratio's steps, each timed alone on ``--threads`` threads (CPU/wall near 1: that step is serial)."""
    import torch
    from qalgos.awq import grid_scales, grid_trial, search_statistics
    from qalgos.awq_gram import factor_output_mse, gram_matrix
    from qalgos.hessian_inverse import cholesky_in_place
    from qalgos.spec import QuantSpec

    torch.set_num_threads(args.threads)
    spec = QuantSpec(bits=4, group_size=128, sym=False)
    weight, x = problem(args)
    rows: list[tuple[str, float, float, float]] = []

    def step(name, fn):
        threads = thread_cpu()
        result, cpu, wall = timed(fn)
        rows.append((name, cpu, wall, busiest_share(threads, thread_cpu())))
        return result

    x_mean, w_mean = step("search_statistics", lambda: search_statistics(x, [weight], spec))
    gram = step("gram_matrix (float32 GEMM, to float64)", lambda: gram_matrix(x))
    gram32 = step("gram to float32", lambda: gram.to(torch.float32))
    scales = grid_scales(x_mean, w_mean, 0.5)
    trial = step("grid_trial (fake quantization)", lambda: grid_trial([weight], scales, spec))[0]
    diff32 = step("D float32", lambda: weight - trial)
    gram16 = step("gram to bfloat16", lambda: gram.to(torch.bfloat16))
    diff16 = step("D to bfloat16", lambda: diff32.to(torch.bfloat16))
    p16 = step("D @ G bfloat16", lambda: diff16 @ gram16)
    step(
        "to float32, mul + sum(float64) bfloat16",
        lambda: float(p16.to(torch.float32).mul_(diff32).sum(dtype=torch.float64)),
    )
    p32 = step("D @ G float32", lambda: diff32 @ gram32)
    step("mul + sum(float64) float32", lambda: float(p32.mul_(diff32).sum(dtype=torch.float64)))
    step("cholesky_in_place (float32)", lambda: cholesky_in_place(gram32))
    tokens = x.shape[0]
    step("factor_output_mse (float32)", lambda: factor_output_mse(gram32, tokens, [weight], [trial]))
    diff64 = step("D float64", lambda: weight.to(torch.float64) - trial.to(torch.float64))
    p64 = step("D @ G float64", lambda: diff64 @ gram)
    step("mul + sum float64", lambda: float((p64 * diff64).sum()))
    print(
        f"one ratio's steps, {args.threads} threads, {args.inputs} inputs, {cpu_line()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        "| step | CPU s | wall s | CPU/wall | busiest thread's share of the CPU |\n| --- | ---: | ---: | ---: | ---: |"
    )
    for name, cpu, wall, share in rows:
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {cpu / max(wall, 1e-9):.2f} | {share:.2f} |")


def run_variant(name: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", f"--variant={name}", *forwarded(args)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["variant"] = name
    return result


def forwarded(args: argparse.Namespace) -> list[str]:
    return [
        f"--out={args.out}",
        f"--in={args.in_}",
        f"--rows={args.rows}",
        f"--length={args.length}",
        f"--threads={args.threads}",
        f"--seed={args.seed}",
        f"--inputs={args.inputs}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=int, default=1024)
    parser.add_argument("--in", dest="in_", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs", choices=("random", "outlier"), default="random")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--variant", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stages", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.stages:
        stages(args)
        return
    names = args.variants.split(",")
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: {', '.join(unknown)} not among {', '.join(VARIANTS)}")
    results = [run_variant(name, args) for name in names]
    print(
        f"\nAWQ scale search, Gram form: weights [{args.out}, {args.in_}], {args.rows} x {args.length} input rows "
        f"({args.inputs}), 4-bit g128, {args.threads} threads, {cpu_line()}"
    )
    print(
        "| variant | CPU s | wall s | CPU/wall | CPU ratio | chosen ratio | losses bf16 / f32 / f64 | fell back "
        "| same bits | peak RSS GiB | load |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    first = results[0]
    for r in results:
        same = r["ratio"] == first["ratio"] and r["loss"] == first["loss"]
        print(
            f"| {r['variant']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['cpu_s'] / r['wall_s']:.2f} | "
            f"{r['cpu_s'] / first['cpu_s']:.2f} | {r['ratio']} | {r['bfloat16']} / {r['float32']} / {r['float64']} | "
            f"{'yes' if r['fell_back'] else 'no'} | {'yes' if same else 'NO'} | {r['peak_gib']:.2f} | "
            f"{r['load']:.1f} |"
        )
    for r in results:
        if r.get("estimate") is not None:
            print(
                f"{r['variant']}: error estimates E32 {r['estimate']:.3g}, E16 {r['bfloat16_estimate']:.3g} "
                "(64x the error measured at the tier's best, or the floor)"
            )
    for r in results:
        print(f"{r['variant']}: qalgos from {r['src']}, {r['threads']} threads")


if __name__ == "__main__":
    main()
