"""Scale side by side: lowbit and GPT-QModel 7.7.0 on the first layers of an 8B dense and a 30B MoE shape.

A random-weight model of ``--shape`` (:mod:`scale_models`: ``llama3-8b`` or ``qwen3-30b-a3b``) cut to its first
``--layers`` decoder layers is written as float16 safetensors shards under ``--work``; both tools quantize it
(``--methods``: GPTQ 4-bit g128 and/or AWQ 4-bit g128, each tool at its defaults otherwise) from the same
``--rows`` x ``--length`` seeded token ids, loaded in the same ``--dtype``, each in its own subprocess with
``--threads`` torch threads. GPT-QModel runs at its defaults (disk offload of finished modules on), lowbit at
its defaults with streaming on (``keep_in_memory=False``: what ``lowbit quantize`` chooses for the whole model;
finished layers spilled to disk, layers read from the source files one at a time). Each worker records, per
decoder layer, the wall and process-CPU seconds from the layer's start to the next layer's (the last: to the end
of ``quantize``; a start is GPT-QModel's first forward of the layer, lowbit's layer loader reading it), and at
the end: ``quantize`` and ``save`` seconds, peak RSS (``VmHWM``, :mod:`peak_memory`), and the bytes the process read
and wrote (``/proc/self/io``: ``rchar``/``wchar`` count every read/write call, ``read_bytes``/``write_bytes``
what reached the block device; safetensors reads through ``mmap`` count in neither ``rchar`` nor, when the
file is in the page cache, ``read_bytes``).

Printed: one table per method (tool, per-layer wall and CPU seconds, ratio to GPT-QModel's, quantize and save
seconds, peak RSS and its ratio, I/O, the projected whole-model hours at the shape's full depth on this
machine). Results are cached as JSON under ``--work``; ``--rerun`` recomputes. Run through ``nox -s bench_scale``
(GPT-QModel installed CPU-only beside lowbit): ``nox -s bench_scale -- --shape llama3-8b --layers 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cpu_info import cpu_line  # noqa: E402
from peak_memory import peak_rss_bytes  # noqa: E402
from qlooper.huge_pages import HUGE_PAGE_ENV, huge_pages_requested  # noqa: E402
from scale_models import calibration_ids, full_model_bytes, projected_seconds, shape, write_model  # noqa: E402
from thread_cpu import spent_by_thread, thread_cpu  # noqa: E402

TOOLS = ("lowbit", "gptqmodel")
METHODS = ("gptq", "awq")


def io_counters() -> dict[str, int]:
    """This process's ``/proc/self/io`` counters (bytes)."""
    counters = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        counters[key.strip()] = int(value)
    return counters


class LayerClock:
    """Wall and CPU timestamps of each decoder layer's start (:meth:`mark`, first call per layer counts)."""

    def __init__(self) -> None:
        self.starts: dict[int, tuple[float, float]] = {}

    def mark(self, index: int) -> None:
        self.starts.setdefault(index, (time.perf_counter(), time.process_time()))

    def on_first_forward(self, layers: Any) -> LayerClock:
        """Mark each of ``layers`` at its first forward (a forward pre-hook; GPT-QModel runs layer ``i`` first
        when it works on it)."""
        for index, layer in enumerate(layers):
            layer.register_forward_pre_hook(lambda module, args, index=index: self.mark(index))
        return self

    def per_layer(self, count: int, end: tuple[float, float]) -> tuple[list[float], list[float]] | None:
        """``(wall, cpu)`` seconds of layers ``0 .. count-1``; None when a layer never ran a forward."""
        if sorted(self.starts) != list(range(count)):
            return None
        marks = [self.starts[i] for i in range(count)] + [end]
        wall = [round(marks[i + 1][0] - marks[i][0], 2) for i in range(count)]
        cpu = [round(marks[i + 1][1] - marks[i][1], 2) for i in range(count)]
        return wall, cpu


def run_lowbit(model_dir: Path, method: str, rows: list[list[int]], dtype: Any, out: Path) -> dict[str, Any]:
    import qhf

    out.parent.mkdir(parents=True, exist_ok=True)
    from qhf.looper_bridge import SourceLayerLoader

    qm = qhf.load(model_dir, {"method": method, "bits": 4, "group_size": 128}, dtype=dtype)
    clock = LayerClock()  # lowbit's capture calls every layer's stand-in: its loader marks a layer's start
    load = SourceLayerLoader.load

    def marked_load(self: SourceLayerLoader, index: int, name: str, layer: Any) -> None:
        clock.mark(index)
        load(self, index, name, layer)

    SourceLayerLoader.load = marked_load  # type: ignore[method-assign]
    threads = thread_cpu()
    start = (time.perf_counter(), time.process_time())
    # streaming, as `lowbit quantize` does for the whole model (its layers exceed qhf's 2 GiB "auto" bound)
    qm.quantize(calibration=rows, keep_in_memory=False, spill_dir=out.parent)
    end = (time.perf_counter(), time.process_time())
    spent = spent_by_thread(threads, thread_cpu())
    qm.save(out)
    saved = time.perf_counter()
    return {"clock": clock, "start": start, "end": end, "saved": saved, "threads": spent}


def run_reference(model_dir: Path, method: str, rows: list[list[int]], dtype: Any, out: Path) -> dict[str, Any]:
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    extra = {"format": "gemm"} if method == "awq" else {}
    config = QuantizeConfig(bits=4, group_size=128, method=method, **extra)
    model = GPTQModel.load(str(model_dir), config, device="cpu", dtype=dtype)
    clock = LayerClock().on_first_forward(model.model.model.layers)
    data = [{"input_ids": r, "attention_mask": [1] * len(r)} for r in rows]
    threads = thread_cpu()
    start = (time.perf_counter(), time.process_time())
    model.quantize(data, tokenizer=AutoTokenizer.from_pretrained(str(model_dir)), batch_size=1)
    end = (time.perf_counter(), time.process_time())
    spent = spent_by_thread(threads, thread_cpu())
    model.save(str(out))
    saved = time.perf_counter()
    return {"clock": clock, "start": start, "end": end, "saved": saved, "threads": spent}


def result_path(work: Path, tool: str, method: str, dtype: str, inputs: dict[str, Any], huge_pages: bool) -> Path:
    """Where one tool's result for one method, dtype, depth, calibration size and huge-page switch is cached."""
    size = f"{inputs['layers']}L-{inputs['rows']}x{inputs['length']}"
    return work / f"{tool}{'+thp' if huge_pages else ''}_{method}_{dtype}_{size}.json"


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    inputs = json.loads((args.work / "inputs.json").read_text())
    out = args.work / "checkpoints" / f"{args.worker}-{args.method}"
    shutil.rmtree(out, ignore_errors=True)
    io_before, began, sys_before = io_counters(), time.perf_counter(), os.times().system
    run = run_reference if args.worker == "gptqmodel" else run_lowbit
    timing = run(Path(inputs["model"]), args.method, inputs["calibration"], getattr(torch, args.dtype), out)
    io_after = io_counters()
    layers = inputs["layers"]
    per_layer = timing["clock"].per_layer(layers, timing["end"])
    quantize_s = timing["end"][0] - timing["start"][0]
    result = {
        "per_layer_wall_s": per_layer[0] if per_layer else None,
        "per_layer_cpu_s": per_layer[1] if per_layer else None,
        "quantize_s": round(quantize_s, 1),
        "quantize_cpu_s": round(timing["end"][1] - timing["start"][1], 1),
        "load_s": round(timing["start"][0] - began, 1),
        "save_s": round(timing["saved"] - timing["end"][0], 1),
        "peak_rss_gib": round(peak_rss_bytes() / 2**30, 2),
        "read_gib": round((io_after["rchar"] - io_before["rchar"]) / 2**30, 2),
        "disk_read_gib": round((io_after["read_bytes"] - io_before["read_bytes"]) / 2**30, 2),
        "written_gib": round((io_after["wchar"] - io_before["wchar"]) / 2**30, 2),
        "out_gib": round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**30, 2),
        "load_at_end": round(os.getloadavg()[0], 1),
        "huge_pages": huge_pages_requested(),  # what this worker's torch took, not only what was asked
        "system_cpu_s": round(os.times().system - sys_before, 1),  # kernel time (page faults, I/O) of the whole run
        # CPU seconds of quantize's busiest threads (serial work vs a loaded machine: thread_cpu.py)
        "quantize_thread_cpu_s": [round(t, 1) for t in timing["threads"][:4]],
    }
    shutil.rmtree(out, ignore_errors=True)
    huge = result["huge_pages"]
    result_path(args.work, args.worker, args.method, args.dtype, inputs, huge).write_text(json.dumps(result))


def projected_hours(result: dict[str, Any], layers: int, depth: int) -> float:
    """Whole-model hours at ``depth`` layers from the measured layers (or the mean over ``quantize``)."""
    per_layer = result["per_layer_wall_s"] or [result["quantize_s"] / layers] * layers
    setup = max(0.0, result["quantize_s"] - sum(per_layer)) + result["load_s"] + result["save_s"]
    return projected_seconds(per_layer, setup, depth) / 3600


def print_tables(args: argparse.Namespace, inputs: dict[str, Any]) -> None:
    spec = shape(args.shape)
    print(
        f"\n{spec.name}: first {inputs['layers']} of {spec.depth} layers, {inputs['rows']}x{inputs['length']} tokens, "
        f"{args.dtype}, {args.threads} threads, {cpu_line()}; model on disk {inputs['bytes'] / 2**30:.1f} GiB "
        f"(whole shape {inputs['full_bytes'] / 2**30:.1f} GiB)"
    )
    for method in args.methods.split(","):
        results = {  # every cached variant: tool, tool+thp
            f"{t}{suffix}": json.loads(p.read_text())
            for t in TOOLS
            for suffix in ("", "+thp")
            if (p := result_path(args.work, t, method, args.dtype, inputs, suffix == "+thp")).exists()
        }
        if not results:
            continue
        print(f"\n{method} 4-bit g128; ratio to GPT-QModel in ()")
        header = (
            f"{'tool':<13} {'layer wall s':>22} {'layer cpu s':>22} {'quantize s':>15} {'save s':>7} "
            f"{'peak GiB':>14} {'read GiB':>8} {'written GiB':>11} {'projected h':>11} {'load':>5}"
        )
        print(header)
        ref = results.get("gptqmodel") or results.get("gptqmodel+thp") or {}
        for tool, r in results.items():
            wall = steady_mean(r["per_layer_wall_s"])
            cpu = steady_mean(r["per_layer_cpu_s"])
            wall_s = "-" if wall is None else f"{wall:.1f}{ratio_text(wall, steady_mean(ref.get('per_layer_wall_s')))}"
            cpu_s = "-" if cpu is None else f"{cpu:.1f}{ratio_text(cpu, steady_mean(ref.get('per_layer_cpu_s')))}"
            quantize = f"{r['quantize_s']}{ratio_text(r['quantize_s'], ref.get('quantize_s'))}"
            peak = f"{r['peak_rss_gib']}{ratio_text(r['peak_rss_gib'], ref.get('peak_rss_gib'))}"
            hours = projected_hours(r, inputs["layers"], spec.depth)
            print(
                f"{tool:<13} {wall_s:>22} {cpu_s:>22} {quantize:>15} {r['save_s']:>7} {peak:>14} "
                f"{r['read_gib']:>8} {r['written_gib']:>11} {hours:>11.2f} {r['load_at_end']:>5}"
            )
            print(
                f"{'':<13} per layer wall {r['per_layer_wall_s']} cpu {r['per_layer_cpu_s']}; "
                f"system cpu s {r.get('system_cpu_s', '-')}; quantize's busiest threads, CPU s "
                f"{r.get('quantize_thread_cpu_s', '-')}"
            )


def steady_mean(values: list[float] | None) -> float | None:
    """Mean of the layers after the first (the first carries one-time costs), or of the only one; None if none."""
    steady = (values or [])[1:] or values or []
    return sum(steady) / len(steady) if steady else None


def ratio_text(value: float, reference: float | None) -> str:
    """`` (value / reference)`` to two places, or nothing without a reference."""
    return f" ({value / reference:.2f})" if reference else ""


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    spec = shape(args.shape)
    model_dir = args.work / f"model-{spec.name}-{args.layers}"
    print(f"writing {spec.name} ({args.layers} layers) to {model_dir}", flush=True)
    written = write_model(model_dir, spec.name, args.layers)
    inputs = {
        "model": str(model_dir),
        "layers": args.layers,
        "rows": args.rows,
        "length": args.length,
        "bytes": written["bytes"],
        "full_bytes": full_model_bytes(spec.name),
        "calibration": calibration_ids(int(spec.fields["vocab_size"]), args.rows, args.length),
    }
    (args.work / "inputs.json").write_text(json.dumps(inputs))
    return inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama3-8b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--methods", default="gptq")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--dtype", default="float32", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("bench-results/scale"))
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument("--keep-model", action="store_true", help="keep the random-weight model on disk")
    parser.add_argument(
        "--huge-pages",
        default="lowbit",
        help="tools whose worker runs with torch's huge-page switch on (THP_MEM_ALLOC_ENABLE=1; the lowbit command "
        "sets it, GPT-QModel does not): comma-separated, 'lowbit' by default, '' for none",
    )
    parser.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--method", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work = args.work / args.shape
    if args.worker:
        worker(args)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    inputs = prepare(args)
    for method in args.methods.split(","):
        if method not in METHODS:
            raise SystemExit(f"--methods: {method!r} is not one of {', '.join(METHODS)}")
        for tool in args.tools.split(","):
            huge = tool in args.huge_pages.split(",")
            if result_path(args.work, tool, method, args.dtype, inputs, huge).exists() and not args.rerun:
                continue
            print(f"running {tool} {method}", flush=True)
            env = {**os.environ, "GPTQMODEL_CPU_WORKERS": str(max(2, args.threads))}
            env["OMP_NUM_THREADS"] = str(args.threads)
            env.pop(HUGE_PAGE_ENV, None)
            if huge:  # torch's huge-page switch, as `lowbit` sets it for its runs
                env[HUGE_PAGE_ENV] = "1"
            command = [sys.executable, __file__, "--shape", args.shape, "--dtype", args.dtype]
            command += ["--work", str(args.work.parent), "--threads", str(args.threads)]
            command += ["--worker", tool, "--method", method]
            if subprocess.run(command, env=env, check=False).returncode != 0:
                print(f"{tool} {method}: failed", flush=True)
    print_tables(args, inputs)
    if not args.keep_model:
        shutil.rmtree(inputs["model"], ignore_errors=True)


if __name__ == "__main__":
    main()
