"""The Ray executor's cost model, projected: a 70B dense and a 600B-class MoE GPTQ run on 1/8/32/128 GPUs.

The model (benchmarks/scaling_model.py: per-item formulas; scaling_shapes.py: the shapes) is evaluated for the
executor as built before issue 38 (``BUILT``), issue 38's design (``ISSUE38``), the executor as built now
(``AS_BUILT``: straddling segments formed on a worker, their rows relayed through the driver, the segment sums
chained through the workers), that design with
bit-exact transport choices (``ISSUE38_TRANSPORT``) and with the layer inputs resident on the workers, codes-only
results and workers loading their weights (``ISSUE38_RESIDENT``), at the GPU rates of :data:`ASSUMPTIONS` (stated,
not measured here), against the same run in one process on one GPU. Prints, per model and design, seconds per
layer by item, run hours and the speed-up over one GPU; a summary of every design; issue 38's done-when verdicts
with the items that bound a failing one and the compute floor (forwards, statistics and solves with nothing
moving); the switches one by one at the done-when points; and how the verdicts move with the solve rate and the
calibration size.

Usage: ``python benchmarks/scaling_cost_model.py [PATH/ray_smollm2_times.json] [--rows R] [--length L]
[--set field=value ...]``. With the JSON (written by tests-ray/test_ray_smollm2.py in ``nox -s ray``), the
measured SmolLM2 table and the rates fitted on it come first. ``--set`` changes a rate of ASSUMPTIONS or a
switch of every design (e.g. ``--set solve=40e12`` or ``--set inputs_resident=True``).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import fields, replace
from pathlib import Path

from scaling_fit import fit_rates, medians
from scaling_model import (
    AS_BUILT,
    BUILT,
    CUMULATIVE,
    ISSUE38,
    ISSUE38_RESIDENT,
    ISSUE38_TRANSPORT,
    Calibration,
    Design,
    Rates,
    layer_cost,
    one_device_cost,
)
from scaling_shapes import DENSE_70B, MOE_600B, SMOLLM2, Shape

ASSUMPTIONS = Rates(
    forward=400e12,  # bf16 GEMMs: about 40% of an H100's dense bf16 peak
    stats=50e12,  # float32 chunk products xᵀx (the reference forms them in float32): near the FP32 peak
    reduce=50e12,  # the same on the driver's GPU
    solve=20e12,  # float32 Cholesky, inverse and column sweeps: latency bound, well under peak
    link=25e9,  # one 400 Gb/s NIC at about half its line rate, per process (driver and each worker)
    sum_add=50e9,  # float64 sums added on the driver: host to GPU copy at PCIe speed, then the add
    call_latency=2e-3,  # one Ray actor call, round trip
    wire_bytes=2,  # bf16 activations and weights on the wire
    host_link=50e9,  # one GPU loading a layer from host memory (PCIe 5 x16, effective)
    lanes=math.inf,  # each worker has its own GPU
    expert_imbalance=1.25,  # the busiest expert owner gets 25% more routed tokens than the mean
    device_sum_add=1e12,  # a worker adding its float64 segment sums in GPU memory (3 bytes moved per byte summed)
)
CALIBRATION = Calibration(rows=128, length=2048)  # 128 rows of 2048 tokens, one row a batch
GPUS = (1, 8, 32, 128)
DESIGNS = {
    "built": BUILT,
    "issue38": ISSUE38,
    "issue38 as built": AS_BUILT,
    "issue38+transport": ISSUE38_TRANSPORT,
    "issue38+resident": ISSUE38_RESIDENT,
}
DONE_WHEN = ((DENSE_70B, 8, 5.0), (MOE_600B, 32, 10.0))
COLUMNS = {
    "forward": "forward",
    "worker_stats": "stats (workers)",
    "driver_reduce": "reduce (driver)",
    "sums": "sums",
    "solve": "solve",
    "solve_bytes": "solve bytes",
    "activations": "activations",
    "changed_params": "changed params",
    "layer_ship": "layer ship",
    "calls": "calls",
}


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def parse_value(text: str) -> object:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def apply_settings(pairs: list[str], rates: Rates, designs: dict[str, Design]) -> tuple[Rates, dict[str, Design]]:
    """``field=value`` pairs applied to the rates or to every design (a clear error for an unknown field)."""
    rate_fields = {f.name for f in fields(Rates)}
    design_fields = {f.name for f in fields(Design)}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: expected field=value")
        value = parse_value(text)
        if key in rate_fields:
            rates = replace(rates, **{key: value})
        elif key in design_fields:
            designs = {name: replace(d, **{key: value}) for name, d in designs.items()}
        else:
            known = f"Rates {sorted(rate_fields)} nor of Design {sorted(design_fields)}"
            raise SystemExit(f"--set {key}: not a field of {known}")
    return rates, designs


def projection_rows(shape: Shape, design: Design, rates: Rates, cal: Calibration) -> list[list[str]]:
    """The one-GPU baseline (its stats in "stats", its layer load in "layer ship") and each GPU count."""
    one = one_device_cost(shape, cal, rates)
    name = shape.name.split(" (")[0]
    rows = []
    for label, n, cost in [("1 GPU, one process", 1, one)] + [
        ("Ray", n, layer_cost(shape, cal, n, design, rates)) for n in GPUS
    ]:
        items = cost.items()
        totals = (f"{cost.total:.2f}", f"{cost.total * shape.layers / 3600:.2f}", f"{one.total / cost.total:.2f}")
        rows.append([name, label, str(n), *(f"{items[k]:.2f}" for k in COLUMNS), *totals])
    return rows


def bound_report(shape: Shape, n: int, target: float, design: Design, rates: Rates, cal: Calibration) -> str:
    """The done-when verdict of ``shape`` on ``n`` GPUs and, if it fails, the items over the budget."""
    one = one_device_cost(shape, cal, rates).total
    cost = layer_cost(shape, cal, n, design, rates)
    speed = one / cost.total
    budget = one / target
    verdict = "met" if speed >= target else "NOT met"
    line = (
        f"* {shape.name} on {n} GPUs: {speed:.2f}x (target {target:g}x, {verdict}); layer {cost.total:.2f} s, "
        f"budget {budget:.2f} s"
    )
    floor = cost.forward + cost.worker_stats + cost.solve
    line += f"; compute floor {floor:.2f} s (at most {one / floor:.2f}x with nothing moving)"
    if speed >= target:
        return line
    top = sorted(cost.items().items(), key=lambda kv: -kv[1])[:4]
    parts = ", ".join(f"{COLUMNS[k]} {v:.2f} s" for k, v in top)
    return line + f"; over by {cost.total - budget:.2f} s; largest items: {parts}"


def speedups(design: Design, rates: Rates, cal: Calibration) -> list[str]:
    """Speed-up over one GPU at each done-when point."""
    out = []
    for shape, n, _target in DONE_WHEN:
        out.append(f"{one_device_cost(shape, cal, rates).total / layer_cost(shape, cal, n, design, rates).total:.2f}")
    return out


def summary_table(rates: Rates, cal: Calibration, designs: dict[str, Design]) -> str:
    """Seconds per layer and speed-up over one GPU of every design at each GPU count."""
    headers = ["model", "design", "1 GPU, one process", *(f"{n} GPU{'s' if n > 1 else ''} (Ray)" for n in GPUS)]
    rows = []
    for shape in (DENSE_70B, MOE_600B):
        one = one_device_cost(shape, cal, rates).total
        for name, design in designs.items():
            cells = []
            for n in GPUS:
                total = layer_cost(shape, cal, n, design, rates).total
                cells.append(f"{total:.2f} s ({one / total:.2f}x)")
            rows.append([shape.name.split(" (")[0], name, f"{one:.2f} s", *cells])
    return table(headers, rows)


def switch_table(rates: Rates, cal: Calibration, extra: list[str]) -> str:
    """Speed-ups at the done-when points as the design's switches turn on one by one."""
    headers = ["design"] + [f"{s.name.split(' (')[0]} on {n} GPUs (target {t:g}x)" for s, n, t in DONE_WHEN]
    rows = []
    for name, design in CUMULATIVE:
        design = apply_settings(extra, rates, {"d": design})[1]["d"]
        rows.append([name, *speedups(design, rates, cal)])
    return table(headers, rows)


def sensitivity_table(rates: Rates, cal: Calibration, design: Design) -> str:
    """Speed-ups at the done-when points under ``design`` as the solve rate and the calibration rows change."""
    points = [f"{s.name.split(' (')[0]} on {n}" for s, n, _ in DONE_WHEN]
    headers = ["solve TFLOP/s", "calibration rows x 2048", *points]
    rows = []
    for solve in (20e12, 40e12, 60e12):
        for rows_n in (128, 512, 1024):
            c = Calibration(rows=rows_n, length=cal.length, batch_rows=cal.batch_rows)
            rows.append([f"{solve / 1e12:g}", str(rows_n), *speedups(design, replace(rates, solve=solve), c)])
    return table(headers, rows)


def measured_section(path: Path) -> None:
    """The SmolLM2 run's medians and the rates fitted on its GPTQ layers (2 workers, float32)."""
    data = json.loads(path.read_text())
    run = data.get("gptq")
    if run is None:
        print(f"{path}: no GPTQ run; no fitted rates\n")
        return
    m = medians(run["layers"])
    rows = run["rows"]
    cal = Calibration(rows=rows, length=run["tokens"] // rows)
    fit = fit_rates(SMOLLM2, cal, data["workers"], m, wire_bytes=4, lanes=2)
    r = fit.rates
    print(f"Measured: SmolLM2-135M GPTQ, {data['workers']} Ray workers, {run['tokens']} tokens (medians per layer)\n")
    items = [k for k in m if k != "bytes"]
    print(
        table(
            [*(f"{k} ms" for k in items), "MB moved"],
            [[*(f"{m[k] * 1e3:.0f}" for k in items), f"{m['bytes'] / 1e6:.1f}"]],
        )
    )
    print(
        f"\nFitted rates: forward {r.forward / 1e9:.1f} GFLOP/s per worker, driver Hessian {r.reduce / 1e9:.1f} "
        f"GFLOP/s, solve {r.solve / 1e9:.1f} GFLOP/s, transfer {r.link / 1e6:.0f} MB/s, layer copy "
        f"{(r.ship_link or 0) / 1e6:.0f} MB/s\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("times", nargs="?", type=Path, help="ray_smollm2_times.json of the ray nox session")
    parser.add_argument("--rows", type=int, default=CALIBRATION.rows)
    parser.add_argument("--length", type=int, default=CALIBRATION.length)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    if args.times is not None:
        if not args.times.is_file():
            raise SystemExit(f"{args.times}: not found; run `python3 -m nox -s ray` first (it writes this file)")
        measured_section(args.times)
    rates, designs = apply_settings(args.set, ASSUMPTIONS, dict(DESIGNS))
    cal = Calibration(rows=args.rows, length=args.length)
    print(f"Calibration: {cal.rows} rows of {cal.length} tokens. Rates (ASSUMPTIONS): {rates}\n")
    headers = ["model", "path", "GPUs", *COLUMNS.values(), "layer s", "run hours", "speed-up vs 1 GPU"]
    for name, design in designs.items():
        print(f"### design {name}: {design}\n")
        rows = [r for shape in (DENSE_70B, MOE_600B) for r in projection_rows(shape, design, rates, cal)]
        print(table(headers, rows) + "\n")
        for shape, n, target in DONE_WHEN:
            print(bound_report(shape, n, target, design, rates, cal))
        print()
    print("### Summary: seconds per layer (speed-up over one GPU)\n")
    print(summary_table(rates, cal, designs) + "\n")
    print("### Switch by switch (speed-up over one GPU)\n")
    print(switch_table(rates, cal, args.set) + "\n")
    print("### Sensitivity of design issue38+resident (speed-up over one GPU)\n")
    print(sensitivity_table(rates, cal, designs["issue38+resident"]) + "\n")


if __name__ == "__main__":
    main()
