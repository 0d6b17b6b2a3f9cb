"""The Ray executor on a local cluster of 1, 2 and 4 worker processes against the cost model's prediction.

One GPTQ run (4 bits, group 128) of a random-weight Llama-like decoder (benchmarks/llama_like.py) in one process,
then under ``RayExecutor("local", workers=N)`` for each N of ``--workers``: every run must give the same bits as
the one-process run (packed tensors, report numbers, final weights; a mismatch stops the benchmark). The
executor's per-layer ``LayerTimes`` of the first N's run (1 worker) fit the rates of the cost model
(benchmarks/scaling_fit.py: forward flop/s, the driver's Hessian flop/s, solve flop/s, transfer and layer-copy
bytes/s, and the layer wall outside those items); the model then predicts the other N's per-layer walls, item by
item, and the table prints measured against predicted with the error (issue 38's target: within 25%).

Threads and cores: the workers take the driver's torch thread count (qlooper.ray_executor: a float reduction
split over another thread count can change a bit), so ``--threads`` (default 1) is every process's count. With
one thread each, N workers use up to N cores: the model gives the N workers ``min(N, --cores)`` cores (default:
the cores this process may run on), i.e. 4 workers on 2 cores each get half a core. More threads per worker on
2 cores would oversubscribe them already at 2 workers. Ray starts its workers at nice 15; the benchmark sets
``RAY_worker_niceness=0`` (unless set) so that they compete with the driver and other jobs on equal terms, and
prints the workers' nice values.

Walls are medians over layers 1.. (layer 0's includes warm-up; a layer's wall is the time between the loop's
``on_layer_done`` calls); with ``--repeats R`` each worker count runs R times (interleaved) and each item counts
its smallest median. The model's bytes per layer are checked against the executor's (a warning past 2%).
The rates are fitted on the built executor. Once issue 38's changes are in the executor, ``--design issue38
--fit-json BUILT.json`` predicts them from an earlier ``--json BUILT.json`` run of the built executor on the
same machine (the rates belong to the machine and the kernels, not to the executor); then check that
:func:`scaling_fit.as_measured_items` maps the model's items onto the new ``LayerTimes`` as the executor times
them (the workers' Hessian products inside ``forward``, the segment sums in ``transfer``).
The built executor is modelled with its transport on one machine (``LOCAL``): the layer copy and the changed
parameters are one shared-memory copy that every worker reads. The host's load average before and after each
run and the CPU seconds of the driver and of the workers are printed beside them: on a shared host the walls
are noisy. "Workers' cores" is the workers' CPU seconds over the seconds they were computing (forwards and
solves, all layers): about how many cores the host gave them (N on a quiet machine with N <= cores); the model
assumes ``--cores``.

Run: ``python benchmarks/bench_ray_scaling.py`` (about 8 minutes on a quiet 2-core machine with the defaults:
hidden 512, MLP 1408, 4 layers, 64 rows of 1024 tokens = 2 Hessian segments of 32768 tokens per input);
``--rows 8 --length 512 --layers 3`` for a quick check. ``nox -s ray_scaling`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_worker_niceness", "0")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from cpu_info import cpu_line  # noqa: E402
from llama_like import LlamaLike, Width, definition  # noqa: E402
from qalgos.spec import QuantSpec  # noqa: E402
from qlooper import LoopOptions, prepare_calibration, quantize_model  # noqa: E402
from scaling_fit import ITEMS, Fit, as_measured_items, fit_rates, medians, predict  # noqa: E402
from scaling_model import AS_BUILT, BUILT, ISSUE38, Calibration  # noqa: E402
from scaling_shapes import Shape, chunk_tokens  # noqa: E402

SPEC = QuantSpec(bits=4, group_size=128)
DRIVER_SHARE = 0.5
"""Of moving token rows between driver and workers on one machine, the driver's serial half (pickling the
shards' inputs, unpickling the recordings); the workers' half (the reverse) runs on them at once."""
LOCAL = replace(BUILT, layer_copy="pipelined")
"""The built executor on one machine: the layer copy and the changed parameters are put once in the shared-memory
object store and every worker reads that copy (one copy's cost, not one per worker over a link)."""
LOCAL_DESIGNS = {
    "built": LOCAL,
    "issue38": replace(AS_BUILT, layer_copy="pipelined"),
    "issue38-driver-straddle": replace(ISSUE38, layer_copy="pipelined"),
}
"""What ``--design`` predicts: the built executor (before issue 38), issue 38's executor as built now (straddling
segments formed on a worker, their rows relayed through the driver, the segment sums chained through the
workers), or as it was before that (straddling segments formed on the driver, every segment sum to the driver);
on one machine the staged broadcast is the same one shared-memory copy."""
SAME_RUN = ("hidden", "inter", "heads", "layers", "rows", "length", "batch_rows", "threads")
"""The arguments a ``--fit-json`` run must share with this one."""
TEMP_DIR = f"/tmp/ray-bench-{os.getpid()}"
"""This benchmark's own Ray session directory (not the machine's shared /tmp/ray)."""
CALL_BYTES = ("hooked inputs", "straddling rows", "segment sums", "layer inputs and outputs", "changed params")
"""The model's byte items that the executor's forward calls carry (LayerTimes ``bytes_out + bytes_back``)."""


class LayerClock:
    """A loop extension recording ``time.perf_counter()`` at each ``on_layer_done`` (the layer walls)."""

    def __init__(self) -> None:
        self.done: list[float] = []

    def on_layer_done(self, _step: Any, _layer: Any) -> None:
        self.done.append(time.perf_counter())

    def walls(self) -> list[float]:
        """Seconds of layers 1.. (between consecutive layer ends)."""
        return [b - a for a, b in zip(self.done, self.done[1:], strict=False)]


def calibration(w: Width, rows: int, length: int, batch_rows: int) -> Any:
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(1, w.vocab, (length,), generator=g).tolist() for _ in range(rows)]
    return prepare_calibration(data, batch_size=batch_rows, max_length=length, min_length=4)


def run_once(w: Width, cal: Any, length: int, executor: Any = None) -> tuple[Any, Any, LayerClock, float]:
    """One GPTQ run on a fresh model; returns (run, model, clock, driver CPU seconds)."""
    model = LlamaLike(w)
    clock = LayerClock()
    options = LoopOptions(executor=executor, extensions=(clock,))
    cpu = time.process_time()
    run = quantize_model(model, definition(length), cal, SPEC, "gptq", options=options)
    return run, model, clock, time.process_time() - cpu


def mismatches(ref: Any, ref_model: Any, run: Any, model: Any) -> list[str]:
    """What differs between two runs: packed tensors, report numbers, final parameters (empty: same bits)."""
    out = []
    if sorted(ref.modules) != sorted(run.modules):
        return [f"modules differ: {sorted(set(ref.modules) ^ set(run.modules))}"]
    for name, done in ref.modules.items():
        theirs = run.modules[name].tensors()
        for key, value in done.tensors().items():
            if value.dtype != theirs[key].dtype or not np.array_equal(value, theirs[key]):
                out.append(f"{name}.{key}")
    for a, b in zip(ref.report, run.report, strict=True):
        if (a.module, a.loss, a.tokens, a.damp, a.fallback) != (b.module, b.loss, b.tokens, b.damp, b.fallback):
            out.append(f"report row {a.module}")
    for (name, p), (_, q) in zip(ref_model.state_dict().items(), model.state_dict().items(), strict=True):
        if not torch.equal(p, q):
            out.append(f"parameter {name}")
    return out


def worker_cpu(identities: list[dict[str, Any]]) -> tuple[float, list[int]]:
    """CPU seconds so far of the worker processes and their nice values."""
    total, nice = 0.0, []
    for who in identities:
        proc = psutil.Process(int(who["pid"]))
        times = proc.cpu_times()
        total += times.user + times.system
        nice.append(proc.nice())
    return total, nice


def ray_run(w: Width, cal: Any, length: int, workers: int, ref: tuple[Any, Any]) -> dict[str, Any]:
    """One run under a local cluster of ``workers`` actors: its LayerTimes of layers 1.., walls, CPU seconds."""
    import ray
    from qlooper.ray_executor import RayExecutor

    load_before = os.getloadavg()[0]
    # A cluster of our own with its own temp directory (removed afterwards); an initialized Ray is used as it is
    # by the executor.
    ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False, _temp_dir=TEMP_DIR)
    try:
        with RayExecutor("local", workers=workers) as executor:
            cpu_before, nice = worker_cpu(executor.identities)
            run, model, clock, driver_cpu = run_once(w, cal, length, executor)
            cpu_after, _ = worker_cpu(executor.identities)
            times = [asdict(t) for t in executor.times]
            lost = len(executor.lost)
    finally:
        ray.shutdown()
    diff = mismatches(*ref, run, model)
    if diff:
        raise SystemExit(f"{workers} Ray workers: not the one-process bits: {diff[:10]}")
    if lost:
        raise SystemExit(f"{workers} Ray workers: {lost} worker(s) lost during the run; rerun")
    return {
        "workers": workers,
        "layer_times": times[1:],
        "busy": sum(t["forward"] + t["solve"] for t in times),
        "walls": clock.walls(),
        "driver_cpu": driver_cpu,
        "worker_cpu": cpu_after - cpu_before,
        "worker_nice": nice,
        "load": (load_before, os.getloadavg()[0]),
    }


def error(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured * 100:+.0f}%" if measured > 0 else "n/a"


def summarize(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """One worker count's repeats: per item the smallest of the repeats' medians (the least disturbed on a shared
    host), the layer wall likewise."""
    per = [medians(r["layer_times"]) for r in repeats]
    return {
        "workers": repeats[0]["workers"],
        "items": {k: min(p[k] for p in per) for k in per[0]},
        "wall": min(statistics.median(r["walls"]) for r in repeats),
    }


def sum_add_rate() -> float:
    """Bytes/s of float64 ``a += b`` here (16 MiB operands): how fast the driver or a worker adds segment sums."""
    a = torch.zeros(2**21, dtype=torch.float64)
    b = torch.ones_like(a)
    a += b
    start = time.perf_counter()
    for _ in range(20):
        a += b
    return 20 * a.numel() * a.element_size() / (time.perf_counter() - start)


def report(
    shape: Shape,
    cal: Calibration,
    runs: list[dict[str, Any]],
    cores: int,
    ones: list[dict[str, Any]],
    design: str,
    fit_runs: list[dict[str, Any]],
) -> None:
    """Fit the rates on the first worker count of ``fit_runs`` (a run of the built executor), predict ``runs``
    under ``design`` (a key of :data:`LOCAL_DESIGNS`) and print measured against predicted."""
    counts = list(dict.fromkeys(r["workers"] for r in runs))
    summaries = [summarize([r for r in runs if r["workers"] == n]) for n in counts]
    base = summarize([r for r in fit_runs if r["workers"] == fit_runs[0]["workers"]])
    built = fit_rates(
        shape,
        cal,
        base["workers"],
        base["items"],
        wire_bytes=4,
        lanes=cores,
        layer_wall=base["wall"],
        design=LOCAL,
        driver_share=DRIVER_SHARE,
    )
    adds = sum_add_rate()
    fit = Fit(replace(built.rates, sum_add=adds, device_sum_add=adds), built.other, LOCAL_DESIGNS[design])
    print(f"\nPredicting design {design!r}: {fit.design}; float64 sums added at {adds / 1e9:.1f} GB/s (measured)")
    r = fit.rates
    print(
        f"\nFitted on {base['workers']} worker(s): forward {r.forward / 1e9:.1f} GFLOP/s per worker, driver Hessian "
        f"{r.reduce / 1e9:.1f} GFLOP/s, solve {r.solve / 1e9:.1f} GFLOP/s, transfer {r.link / 1e6:.0f} MB/s, layer "
        f"copy {(r.ship_link or 0) / 1e6:.0f} MB/s, other {fit.other * 1e3:.0f} ms per layer; {cores} cores shared "
        "by the workers\n"
    )
    print(row("workers", "item", "measured ms", "predicted ms", "error") + "\n" + "|---" * 5 + "|")
    for summary in summaries:
        n, measured = summary["workers"], summary["items"]
        cost = predict(shape, cal, n, fit)
        items = as_measured_items(cost)
        for k in ITEMS:
            print(row(n, k, f"{measured[k] * 1e3:.0f}", f"{items[k] * 1e3:.0f}", error(items[k], measured[k])))
        moved = sum(cost.bytes.get(k, 0.0) for k in CALL_BYTES)
        mb = measured["bytes"]
        print(row(n, "MB moved (calls)", f"{mb / 1e6:.1f}", f"{moved / 1e6:.1f}", error(moved, mb)))
        if abs(moved - mb) > 0.02 * mb:
            print(
                f"WARNING: the model's bytes are {error(moved, mb)} off the executor's: its byte formulas need a look"
            )
        predicted = sum(items.values()) + fit.other
        wall = summary["wall"]
        print(row(n, "**layer wall**", f"{wall * 1e3:.0f}", f"{predicted * 1e3:.0f}", error(predicted, wall)))
    heads = (
        "run",
        "median layer wall ms",
        "driver CPU s",
        "worker CPU s",
        "workers' cores",
        "load before/after",
        "nice",
    )
    print("\n" + row(*heads) + "\n" + "|---" * len(heads) + "|")
    for one in ones:
        one_wall = statistics.median(one["walls"]) * 1e3
        print(row("one process (lockstep)", f"{one_wall:.0f}", f"{one['driver_cpu']:.1f}", "-", "-", load(one), "-"))
    for run in runs:
        wall = statistics.median(run["walls"]) * 1e3
        cpus = (f"{run['driver_cpu']:.1f}", f"{run['worker_cpu']:.1f}", f"{run['worker_cpu'] / run['busy']:.2f}")
        print(row(f"{run['workers']} Ray worker(s)", f"{wall:.0f}", *cpus, load(run), run["worker_nice"]))


def row(*cells: object) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def load(run: dict[str, Any]) -> str:
    return f"{run['load'][0]:.1f}/{run['load'][1]:.1f}"


def load_fit_runs(path: Path, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of an earlier ``--json`` file, checked to be of the same sizes as ``args``."""
    if not path.is_file():
        raise SystemExit(f"--fit-json {path}: not found")
    data = json.loads(path.read_text())
    other = data.get("args", {})
    differ = [k for k in SAME_RUN if other.get(k) != args[k]]
    if differ:
        found = ", ".join(f"{k} {other.get(k)!r} (this run: {args[k]!r})" for k in differ)
        raise SystemExit(f"--fit-json {path}: another run's sizes: {found}")
    return list(data["runs"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--inter", type=int, default=1408)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch-rows", type=int, default=2)
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts; the first is fitted")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the driver and every worker")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=1, help="runs per worker count; per item the smallest counts")
    parser.add_argument("--design", choices=sorted(LOCAL_DESIGNS), default="built", help="the executor to predict")
    parser.add_argument(
        "--fit-json", type=Path, help="fit the rates on this earlier --json run of the built executor (same sizes)"
    )
    parser.add_argument("--json", type=Path, help="write the measured runs here")
    args = parser.parse_args()
    if args.layers < 2:
        raise SystemExit("--layers: expected at least 2 (walls are measured from layer 1 on)")
    if args.repeats < 1:
        raise SystemExit(f"--repeats: expected at least 1, found {args.repeats}")
    counts = [int(x) for x in args.workers.split(",")]
    fit_runs = load_fit_runs(args.fit_json, vars(args)) if args.fit_json is not None else None
    if args.design != "built" and fit_runs is None:
        raise SystemExit(
            f"--design {args.design}: the rates are fitted on the built executor; pass --fit-json with an earlier "
            "--json run of it (same sizes, same machine)"
        )
    torch.set_num_threads(args.threads)
    w = Width(hidden=args.hidden, inter=args.inter, heads=args.heads, kv_heads=args.heads, layers=args.layers)
    shape = Shape("llama-like", args.layers, w.hidden, w.kv, w.inter)
    mask = args.batch_rows * args.length * args.length  # each batch's call carries its bool [b, 1, t, t] mask
    cal_model = Calibration(rows=args.rows, length=args.length, batch_rows=args.batch_rows, call_extra_bytes=mask)
    cal = calibration(w, args.rows, args.length, args.batch_rows)
    segments = cal_model.tokens / (8 * chunk_tokens(w.hidden))
    print(f"CPU: {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} torch thread(s) per process")
    print(
        f"Model: hidden {w.hidden}, MLP {w.inter}, {w.heads} heads, {w.layers} layers, float32; calibration "
        f"{args.rows} rows x {args.length} tokens in batches of {args.batch_rows} ({cal_model.tokens} tokens, "
        f"{segments:.2f} Hessian segments of the hidden-width inputs); GPTQ 4 bits group 128"
    )
    ones, runs = [], []
    try:
        for _ in range(args.repeats):  # each repeat: one process, then every worker count (interleaved)
            load = os.getloadavg()[0]
            ref_run, ref_model, clock, cpu = run_once(w, cal, args.length)
            ones.append({"walls": clock.walls(), "driver_cpu": cpu, "load": (load, os.getloadavg()[0])})
            runs += [ray_run(w, cal, args.length, n, (ref_run, ref_model)) for n in counts]
    finally:
        shutil.rmtree(TEMP_DIR, ignore_errors=True)  # the Ray sessions' logs and sockets, ours alone
    print(f"Bits: every Ray run equal to the one-process run ({', '.join(str(n) for n in counts)} workers)")
    report(shape, cal_model, runs, args.cores, ones, args.design, fit_runs or runs)
    if args.json is not None:
        arguments = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        record = {"args": arguments, "one_process": ones, "runs": runs}
        args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    sys.exit(main())
