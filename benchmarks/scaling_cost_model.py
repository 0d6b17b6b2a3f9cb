"""The Ray executor's cost model: measured per-layer times of the 2-worker SmolLM2 run, projected to big models.

Input: ``ray_smollm2_times.json`` written by tests-ray/test_ray_smollm2.py (the ``ray`` nox session), one
entry per method with the per-layer ``LayerTimes`` of qlooper's sharded executor. Output (stdout, tables):

1. measured: median per layer of forward (slowest worker), reduce (driver feeding the statistics in batch
   order), solve (spread jobs), transfer (forward calls' wall minus compute) and layer shipping, the bytes
   moved (of them the changed parameters sent with the calls), with the rates they imply on this machine
   (effective GFLOP/s of forwards, of the Hessian reduce, of the solves; MB/s of the transfers);
2. projected: the same structure (what runs on N workers, what stays serial on the driver, bytes per call)
   for a 70B dense and a 600B MoE model on N GPUs, with the GPU rates of ASSUMPTIONS (not measured here).

Usage: ``python benchmarks/scaling_cost_model.py PATH/ray_smollm2_times.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """A decoder stack for the model: ``layers``, ``hidden``, ``kv`` (key/value width), ``inter`` (MLP width
    of the dense MLP or of one expert), ``experts`` (0: dense), ``top_k`` and ``shared`` experts per token."""

    name: str
    layers: int
    hidden: int
    kv: int
    inter: int
    experts: int = 0
    top_k: int = 0
    shared: int = 0

    def attention_params(self) -> tuple[int, int]:
        qkv = self.hidden * (self.hidden + 2 * self.kv)
        return qkv, self.hidden * self.hidden

    def mlp_params(self) -> int:
        """Parameters of one MLP (dense) or one expert."""
        return 3 * self.hidden * self.inter

    def layer_params(self) -> int:
        qkv, o = self.attention_params()
        count = 1 if not self.experts else self.experts + self.shared
        return qkv + o + count * self.mlp_params()

    def forward_flops_per_token(self) -> float:
        """Flops of the sharded path's layer forwards per calibration token: one capture forward per group
        (each up to the group's last module) plus the replay; an MoE token runs top_k + shared experts."""
        qkv, o = self.attention_params()
        mlp = self.mlp_params() * (1 if not self.experts else self.top_k + self.shared)
        gate_up = 2 * mlp / 3
        if not self.experts:
            executed = qkv + (qkv + o) + (qkv + o + gate_up) + (qkv + o + mlp) + (qkv + o + mlp)
        else:  # expert groups are not stopped early: their captures run the whole layer
            executed = qkv + (qkv + o) + 3 * (qkv + o + mlp)
        return 2.0 * executed

    def reduce_flops_per_token(self) -> float:
        """Hessian accumulation on the driver per token: ``x xᵀ`` over the lower triangle (5/8 of a full
        product with 4 blocks) for each distinct input; an MoE token feeds top_k + shared experts' inputs."""
        per_input = [self.hidden, self.hidden, self.hidden]
        per_input.append(self.inter)
        if self.experts:
            per_input = [self.hidden, self.hidden] + [self.hidden, self.inter] * (self.top_k + self.shared)
        return sum(2.0 * n * n * 5 / 8 for n in per_input)

    def solve_groups(self) -> list[list[float]]:
        """GPTQ solve flops per job, per calculation group (one job per shared input: Cholesky ``in³/3`` plus
        ``2·out·in²``). Groups run one after another (the next group's capture needs this one's weights);
        the jobs of one group run in parallel, round-robin over the workers."""
        qkv_out = self.hidden + 2 * self.kv

        def job(n_in: int, out: int) -> float:
            return n_in**3 / 3 + 2.0 * out * n_in * n_in

        count = 1 if not self.experts else self.experts + self.shared
        return [
            [job(self.hidden, qkv_out)],
            [job(self.hidden, self.hidden)],
            [job(self.hidden, 2 * self.inter)] * count,
            [job(self.inter, self.hidden)] * count,
        ]

    def calls_per_layer(self) -> int:
        """Sharded forward calls per layer: one capture per group plus the replay (before changed-only
        shipping, each of them carried the whole layer state to every worker)."""
        return len(self.solve_groups()) + 1

    def activation_bytes_per_token(self, dtype_bytes: int) -> float:
        """Recorded inputs sent back to the driver per token (one copy per distinct input per batch)."""
        if not self.experts:
            return dtype_bytes * (3 * self.hidden + self.inter)
        return dtype_bytes * (2 * self.hidden + (self.top_k + self.shared) * (self.hidden + self.inter))


SMOLLM2 = Shape("SmolLM2-135M", layers=30, hidden=576, kv=192, inter=1536)
TOY = Shape("toy decoder (qlooper tests)", layers=4, hidden=64, kv=64, inter=128)
MEASURED_SHAPES = {"smollm2": SMOLLM2, "toy": TOY}
DENSE_70B = Shape("70B dense (Llama-3-70B shapes)", layers=80, hidden=8192, kv=1024, inter=28672)
MOE_600B = Shape(
    "600B MoE (DeepSeek-V3-like shapes)", layers=61, hidden=7168, kv=1024, inter=2048, experts=256, top_k=8, shared=1
)

ASSUMPTIONS = {
    "tokens": 128 * 2048,  # calibration: 128 rows of 2048 tokens
    "gpu_forward_flops": 400e12,  # bf16 GEMM, about 40% of an H100's dense peak
    "gpu_reduce_flops": 50e12,  # float32 x xᵀ (the reference forms it in float32) on the driver GPU
    "gpu_solve_flops": 20e12,  # float32 Cholesky + column sweeps: latency bound, well under peak
    "link_bytes_per_s": 25e9,  # one 400 Gb/s NIC at about half its line rate, per process
    "dtype_bytes": 2,  # bf16 activations and weights on the wire
}


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-|-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def measured(data: dict) -> dict[str, float]:
    """Print the measured table; return this machine's rates from the GPTQ run."""
    workers = data["workers"]
    shape = MEASURED_SHAPES[data.get("model", "smollm2")]
    rows = []
    rates: dict[str, float] = {}
    for method in ("gptq", "awq"):
        run = data.get(method)
        if run is None:
            continue
        layers = run["layers"]
        tokens = run.get("tokens") or run["rows"] * run["length"]
        parts = {k: median(layers, k) for k in ("forward", "reduce", "solve", "transfer", "layer_ship")}
        moved = median(layers, "bytes_out") + median(layers, "bytes_back")
        changed = median(layers, "bytes_changed")
        layer_mb = median(layers, "layer_bytes") / 1e6
        wall = run["ray_seconds"] / len(layers)
        rows.append(
            [
                method,
                str(tokens),
                *(f"{parts[k] * 1e3:.0f}" for k in parts),
                f"{moved / 1e6:.1f}",
                f"{changed / 1e6:.1f}",
                f"{layer_mb * workers * shape.calls_per_layer():.1f}",
                f"{wall * 1e3:.0f}",
                f"{run['one_process_seconds'] / len(layers) * 1e3:.0f}",
            ]
        )
        if method == "gptq":
            rates["forward"] = shape.forward_flops_per_token() * tokens / workers / parts["forward"]
            rates["reduce"] = shape.reduce_flops_per_token() * tokens / parts["reduce"]
            rates["solve"] = sum(sum(g) for g in shape.solve_groups()) / parts["solve"]
            rates["link"] = moved / parts["transfer"]
    print(
        f"Measured: {shape.name}, {workers} Ray workers, "
        f"{data.get('torch_threads', '?')} torch threads each (medians per layer, ms)\n"
    )
    headers = [
        "method",
        "tokens",
        "forward",
        "reduce",
        "solve",
        "transfer",
        "layer ship",
        "MB moved",
        "of which changed params",
        "params if sent every call",
        "layer wall (ray)",
        "layer wall (1 process)",
    ]
    print(table(headers, rows))
    if not rates:
        print("\nNo GPTQ run in the file: no implied rates (the CPU-worker projection needs them)\n")
        return rates
    print(
        "\nImplied rates on this machine (GPTQ run): "
        f"forward {rates['forward'] / 1e9:.1f} GFLOP/s per worker, reduce {rates['reduce'] / 1e9:.1f} GFLOP/s, "
        f"solve {rates['solve'] / 1e9:.1f} GFLOP/s (2 workers), transfer {rates['link'] / 1e6:.0f} MB/s\n"
    )
    return rates


def project(shape: Shape, gpus: int, rates: dict[str, float] | None = None) -> list[str]:
    """Seconds per layer on ``gpus`` workers as built: forwards split over the workers; the Hessian reduce
    serial on the driver; each group's solve jobs in waves over the workers; every hooked input sent back
    to the driver over one link; the layer sent once to every worker, then each solved weight once more to
    every worker (changed-only shipping: every linear weight of a layer is solved once), both over the
    driver's link (no broadcast tree assumed).
    ``rates`` (flop/s of ``forward`` per worker, ``reduce``, ``solve``): default the GPU ASSUMPTIONS."""
    a = ASSUMPTIONS
    rates = rates or {"forward": a["gpu_forward_flops"], "reduce": a["gpu_reduce_flops"], "solve": a["gpu_solve_flops"]}
    tokens = a["tokens"]
    forward = shape.forward_flops_per_token() * tokens / gpus / rates["forward"]
    reduce = shape.reduce_flops_per_token() * tokens / rates["reduce"]
    solve = 0.0
    for group in shape.solve_groups():
        jobs = sorted(group, reverse=True)
        solve += sum(max(jobs[i : i + gpus]) for i in range(0, len(jobs), gpus)) / rates["solve"]
    back = shape.activation_bytes_per_token(a["dtype_bytes"]) * tokens / a["link_bytes_per_s"]
    layer_bytes = shape.layer_params() * a["dtype_bytes"]
    ship = layer_bytes * gpus * 2 / a["link_bytes_per_s"]
    solves = sum(sum(g) for g in shape.solve_groups()) / rates["solve"]
    one = shape.forward_flops_per_token() * tokens / rates["forward"] + reduce + solves
    total = forward + reduce + solve + back + ship
    hours = total * shape.layers / 3600
    return [
        shape.name,
        str(gpus),
        f"{forward:.1f}",
        f"{reduce:.1f}",
        f"{solve:.1f}",
        f"{back:.1f}",
        f"{ship:.1f}",
        f"{total:.1f}",
        f"{hours:.2f}",
        f"{one * shape.layers / 3600:.2f}",
    ]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: scaling_cost_model.py PATH/ray_smollm2_times.json")
    path = Path(sys.argv[1])
    if not path.is_file():
        sys.exit(f"{path}: not found; run `python3 -m nox -s ray` first (it writes this file)")
    data = json.loads(path.read_text())
    rates = measured(data)
    print(
        "Projected (GPTQ; seconds per layer; assumptions: "
        + ", ".join(f"{k}={v:g}" for k, v in ASSUMPTIONS.items())
        + ")\n"
    )
    rows = [project(shape, n) for shape in (DENSE_70B, MOE_600B) for n in (8, 32, 128)]
    headers = [
        "model",
        "GPUs",
        "forward",
        "reduce (driver)",
        "solve",
        "activations back",
        "layer ship",
        "layer",
        "run hours",
        "1 GPU hours",
    ]
    print(table(headers, rows))
    if not rates:
        return
    print("\nThe same on CPU workers at this machine's measured rates (forward per worker, reduce, solve)\n")
    rows = [project(shape, n, rates) for shape in (DENSE_70B, MOE_600B) for n in (8, 32, 128)]
    headers[1], headers[-1] = "CPU workers", "1 worker hours"
    print(table(headers, rows))


if __name__ == "__main__":
    main()
