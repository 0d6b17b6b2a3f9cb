"""qalgos GPTQ: Hessian accumulation and solve time beside the FLOP-bound matmul time and a classic solver.

For each layer shape (out x in) with T calibration tokens, measured side by side in one process:

* ``hessian``: ``GPTQ.add_batch`` over T tokens (float64 accumulation), beside ``matmul XᵀX``: a plain
  float32 matmul of the same FLOPs (2·T·in²), the limit on this machine.
* ``solve``: ``GPTQ.quantize`` (damping, inverse factor, column solve), beside ``matmul W·H``: a plain
  float32 matmul with the solve's dominant FLOPs (out·in², the lazy updates), and beside ``classic``: the
  classic GPTQ loop written in the style of the reference implementation (float32 Cholesky,
  ``cholesky_inverse``, second Cholesky, 128-column blocks with per-column rank-1 updates on ``W [out, in]``).
* ``llama-2048 layer``: the Hessians and the seven GPTQ solves of one decoder layer of a hidden-2048 Llama
  (the unit in which peers report solve time), beside matmuls of the solves' dominant FLOPs.
* ``error``: relative output error ``||XWᵀ - XQᵀ|| / ||XWᵀ||`` of both solvers (equal quality check).

Times are the median of ``--repeats`` runs, as wall seconds and as process CPU seconds (summed over
threads); ratios use CPU seconds, which stay meaningful when other processes share the cores. Asserts
nothing about time.

    python benchmarks/bench_qalgos_gptq.py [--tokens 8192] [--shapes 4096x4096,11008x4096] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec

BATCH = 2048


def timed(fn, repeats: int) -> tuple[tuple[float, float], object]:
    """Median (wall seconds, process CPU seconds summed over threads) of ``repeats`` calls, and the value."""
    walls, cpus, value = [], [], None
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        value = fn()
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return (statistics.median(walls), statistics.median(cpus)), value


def classic_gptq(w: torch.Tensor, h: torch.Tensor, bits: int, group: int, damp: float) -> torch.Tensor:
    """The classic reference-style GPTQ loop (float32, natural order, symmetric), returning Q [out, in]."""
    w = w.clone()
    h = h.clone()
    cols = w.shape[1]
    maxq = 2**bits - 1
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h.diagonal().add_(damp * torch.mean(torch.diag(h)))
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q_all = torch.zeros_like(w)
    scale = zero = None
    for i1 in range(0, cols, 128):
        i2 = min(i1 + 128, cols)
        w1 = w[:, i1:i2].clone()
        q1 = torch.zeros_like(w1)
        err1 = torch.zeros_like(w1)
        hinv1 = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = w1[:, i]
            d = hinv1[i, i]
            if (i1 + i) % group == 0:
                g = w[:, i1 + i : i1 + i + group]
                xmax = torch.maximum(g.amax(dim=1).clamp(min=0), -g.amin(dim=1).clamp(max=0))
                xmax = torch.where(xmax == 0, torch.ones_like(xmax), xmax)
                scale = 2 * xmax / maxq
                zero = torch.full_like(scale, (maxq + 1) / 2)
            q = scale * (torch.clamp(torch.round(col / scale) + zero, 0, maxq) - zero)
            q1[:, i] = q
            err = (col - q) / d
            w1[:, i:] -= err.unsqueeze(1).matmul(hinv1[i, i:].unsqueeze(0))
            err1[:, i] = err
        q_all[:, i1:i2] = q1
        w[:, i2:] -= err1.matmul(hinv[i1:i2, i2:])
    return q_all


def rel_error(x: torch.Tensor, w: torch.Tensor, q: torch.Tensor) -> float:
    ref = x @ w.T
    return float(torch.linalg.norm(ref - x @ q.T) / torch.linalg.norm(ref))


def run_shape(out: int, in_: int, tokens: int, repeats: int) -> list[tuple[str, object, float, str]]:
    gen = torch.Generator().manual_seed(0)
    mix = torch.randn(in_, in_, generator=gen) / in_**0.5
    x = torch.randn(tokens, in_, generator=gen) @ mix
    w = torch.randn(out, in_, generator=gen) * 0.02
    spec = QuantSpec(bits=4, group_size=128)

    def accumulate() -> GPTQ:
        gptq = GPTQ(in_, spec)
        for chunk in x.split(BATCH):
            gptq.add_batch(chunk)
        return gptq

    t_hess, gptq = timed(accumulate, repeats)
    t_xtx, _ = timed(lambda: x.T @ x, repeats)
    t_solve, result = timed(lambda: gptq.quantize(w), repeats)
    square = torch.randn(in_, in_, generator=gen)
    t_mm, _ = timed(lambda: w @ square, repeats)
    h = gptq.hessian()
    t_classic, q_classic = timed(lambda: classic_gptq(w, h, 4, 128, spec.damp_percent), repeats)
    e_ours = rel_error(x, w, result.dequantized)
    e_classic = rel_error(x, w, q_classic)
    name = f"{out}x{in_}"
    return [
        (f"{name} hessian (T={tokens})", t_hess, t_hess[1] / t_xtx[1], "vs matmul XᵀX"),
        (f"{name} matmul XᵀX (limit)", t_xtx, 1.0, ""),
        (f"{name} solve", t_solve, t_solve[1] / t_mm[1], "vs matmul W·H"),
        (f"{name} matmul W·H (limit)", t_mm, 1.0, ""),
        (f"{name} classic solve", t_classic, t_classic[1] / t_solve[1], "classic / ours"),
        (f"{name} rel. output error ours", e_ours, e_ours / e_classic, "ours / classic"),
        (f"{name} rel. output error classic", e_classic, 1.0, ""),
    ]


def run_llama_layer(tokens: int, repeats: int) -> list[tuple[str, object, float, str]]:
    """GPTQ on every linear of one hidden-2048 Llama decoder layer (q, k, v, o: 2048x2048; gate, up:
    5632x2048; down: 2048x5632): Hessians for the four distinct inputs, then the seven solves."""
    gen = torch.Generator().manual_seed(1)
    hidden, inter = 2048, 5632
    modules = {
        "q": (hidden, hidden, "attn"),
        "k": (hidden, hidden, "attn"),
        "v": (hidden, hidden, "attn"),
        "o": (hidden, hidden, "o"),
        "gate": (inter, hidden, "mlp"),
        "up": (inter, hidden, "mlp"),
        "down": (hidden, inter, "down"),
    }
    inputs = {
        name: torch.randn(tokens, width, generator=gen) @ (torch.randn(width, width, generator=gen) / width**0.5)
        for name, width in (("attn", hidden), ("o", hidden), ("mlp", hidden), ("down", inter))
    }
    weights = {name: torch.randn(out, in_, generator=gen) * 0.02 for name, (out, in_, _) in modules.items()}
    spec = QuantSpec(bits=4, group_size=128)

    def accumulate() -> dict[str, GPTQ]:
        solvers = {}
        for name, x in inputs.items():
            solvers[name] = GPTQ(x.shape[1], spec)
            for chunk in x.split(BATCH):
                solvers[name].add_batch(chunk)
        return solvers

    t_hess, solvers = timed(accumulate, repeats)
    t_xtx, _ = timed(lambda: [x.T @ x for x in inputs.values()], repeats)
    t_solve, _ = timed(lambda: [solvers[src].quantize(weights[n]) for n, (_, _, src) in modules.items()], repeats)
    flops = sum(out * in_ * in_ for out, in_, _ in modules.values())
    a = torch.randn(2048, 2048, generator=gen)
    t_mm, _ = timed(lambda: [a @ a for _ in range(round(flops / 2048**3))], repeats)
    return [
        (f"llama-2048 layer hessians (T={tokens})", t_hess, t_hess[1] / t_xtx[1], "vs matmuls XᵀX"),
        ("llama-2048 layer matmuls XᵀX (limit)", t_xtx, 1.0, ""),
        ("llama-2048 layer: 7 GPTQ solves", t_solve, t_solve[1] / t_mm[1], "vs matmul Σout·in²"),
        ("llama-2048 layer matmul Σout·in² (limit)", t_mm, 1.0, ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--shapes", default="4096x4096,11008x4096", help="comma-separated OUTxIN")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-llama-layer", action="store_true", help="skip the hidden-2048 Llama layer")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    rows = []
    for shape in args.shapes.split(","):
        out, in_ = (int(v) for v in shape.lower().split("x"))
        rows.extend(run_shape(out, in_, args.tokens, args.repeats))
    if not args.no_llama_layer:
        rows.extend(run_llama_layer(args.tokens, args.repeats))
    print(f"{'measurement':40} {'wall s':>9} {'cpu s':>9} {'ratio':>7}  ratio meaning (CPU seconds)")
    for label, value, ratio, meaning in rows:
        if isinstance(value, tuple):
            print(f"{label:40} {value[0]:>9.3f} {value[1]:>9.3f} {ratio:>7.2f}  {meaning}")
        else:
            print(f"{label:40} {value:>9.4f} {'':>9} {ratio:>7.2f}  {meaning}")


if __name__ == "__main__":
    main()
