"""GPTQ per layer with float32 against bfloat16 layer forwards (``LoopOptions.compute_dtype``) on Llama-3-8B's
layer shape: hidden 4096, MLP 14336, 32 heads / 8 KV heads, random weights (transformers' init), 8 x 512
calibration tokens. Prints a table; asserts nothing about time.

Each compute dtype runs in its own subprocess (so its peak resident set, ``ru_maxrss``, is its own), one after
the other: ``qlooper.quantize_model`` with GPTQ 4-bit g128 over ``--layers`` decoder layers, lockstep on. Per
layer: wall seconds, process CPU seconds (the speed measure on a shared machine), and the seconds inside the
Hessian accumulation (``HessianAccumulator.add_batch``) and the solves (``GPTQ.quantize``); forwards are the
rest. Then the two runs are compared: the fraction of codes that differ, the largest code difference and the
largest relative difference of a module's GPTQ loss. The CPU is named (model name, ``avx512_bf16`` /
``amx_bf16`` flags): bfloat16 forwards are fast only where the CPU has bfloat16 instructions.

    python benchmarks/bench_qlooper_gptq_dtype.py [--layers 2] [--rows 8] [--length 512] [--dtypes float32,bfloat16]
        [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_info import cpu_line
from random_llama import random_llama

HERE = Path(__file__).resolve()
SHAPE = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8}
VOCAB = 1024


def worker(args: argparse.Namespace) -> None:
    """One compute dtype: quantize, write per-layer times, codes and losses to ``args.out``."""
    import numpy as np
    import qalgos.gptq as qgptq
    import qalgos.hessian as qhessian
    import torch
    from qalgos.spec import QuantSpec
    from qlooper import LoopOptions, quantize_model

    model, definition, calibration = random_llama(SHAPE, args.layers, VOCAB, args.rows, args.length, batch_size=1)

    spent = {"accumulate": 0.0, "solve": 0.0}

    def timed(owner: Any, name: str, key: str) -> None:
        original = getattr(owner, name)

        def wrapped(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent[key] += time.perf_counter() - start

        setattr(owner, name, wrapped)

    timed(qhessian.HessianAccumulator, "add_batch", "accumulate")
    timed(qgptq.GPTQ, "quantize", "solve")
    layers: list[dict[str, float]] = []
    mark = {"wall": time.perf_counter(), "cpu": time.process_time()}

    class Times:
        def on_layer_done(self, step: Any, layer: Any) -> None:
            wall, cpu = time.perf_counter(), time.process_time()
            layers.append({"wall": wall - mark["wall"], "cpu": cpu - mark["cpu"], **spent})
            mark.update(wall=wall, cpu=cpu)
            spent.update(accumulate=0.0, solve=0.0)

    options = LoopOptions(compute_dtype=args.dtype, device=args.device, extensions=(Times(),), finalizer_workers=1)
    run = quantize_model(model, definition, calibration, QuantSpec(bits=4, group_size=128), "gptq", options=options)
    codes = {name: done.weight.codes for name, done in run.modules.items()}
    np.savez(args.out, **codes)
    losses = {row.module: row.loss for row in run.report}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gpu_peak = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else 0
    record = {"layers": layers, "losses": losses, "peak": peak, "gpu_peak": gpu_peak}
    Path(f"{args.out}.json").write_text(json.dumps(record))


def run_dtype(dtype: str, args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], Path]:
    out = work / f"{dtype}.npz"
    cmd = [sys.executable, str(HERE), "--worker", "--dtype", dtype, "--out", str(out),
           "--layers", str(args.layers), "--rows", str(args.rows), "--length", str(args.length),
           "--device", args.device]  # fmt: skip
    subprocess.run(cmd, check=True)
    return json.loads(Path(f"{out}.json").read_text()), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--device", default="cpu", help="where the layers compute (cpu, cuda[:N]; default: cpu)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    import numpy as np
    import torch

    dtypes = args.dtypes.split(",")
    print(f"CPU    {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(args.device))
        print(f"GPU    {name} (the layers compute there; the column solves run on the CPU)")
    print(f"shape  Llama-3-8B layer (hidden 4096, MLP 14336, 32/8 heads), {args.layers} layers, random weights; "
          f"GPTQ 4-bit g128; {args.rows} x {args.length} calibration tokens; lockstep")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        results = {dtype: run_dtype(dtype, args, Path(tmp)) for dtype in dtypes}
        print()
        print("| compute dtype | layer | wall s | CPU s | Hessian accumulation s | solves s | forwards s (rest) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for dtype, (data, _) in results.items():
            for i, t in enumerate(data["layers"]):
                rest = t["wall"] - t["accumulate"] - t["solve"]
                print(f"| {dtype} | {i} | {t['wall']:.1f} | {t['cpu']:.1f} | {t['accumulate']:.1f} | "
                      f"{t['solve']:.1f} | {rest:.1f} |")  # fmt: skip
        print()
        print("| compute dtype | peak RSS GiB | peak GPU GiB | wall s, all layers | CPU s, all layers | CPU ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        base_cpu = sum(t["cpu"] for t in results[dtypes[0]][0]["layers"])
        for dtype, (data, _) in results.items():
            wall, cpu = sum(t["wall"] for t in data["layers"]), sum(t["cpu"] for t in data["layers"])
            gpu = f"{data['gpu_peak'] / 2**30:.2f}" if data.get("gpu_peak") else "-"
            print(f"| {dtype} | {data['peak'] / 2**30:.2f} | {gpu} | {wall:.1f} | {cpu:.1f} | {cpu / base_cpu:.2f} |")
        first, (ref_data, ref_out) = dtypes[0], results[dtypes[0]]
        ref_codes = np.load(ref_out)
        for dtype in dtypes[1:]:
            data, out = results[dtype]
            codes = np.load(out)
            differ = sum(int((codes[k] != ref_codes[k]).sum()) for k in ref_codes.files)
            total = sum(ref_codes[k].size for k in ref_codes.files)
            largest = max(int(np.abs(codes[k].astype(int) - ref_codes[k].astype(int)).max()) for k in ref_codes.files)
            rel = max(abs(data["losses"][m] / ref_data["losses"][m] - 1) for m in ref_data["losses"])
            mean_ratio = np.mean([data["losses"][m] / ref_data["losses"][m] for m in ref_data["losses"]])
            print()
            print(f"{dtype} vs {first}: {differ / total:.2%} of codes differ (largest difference {largest}); "
                  f"module loss ratio mean {mean_ratio:.4f}, largest relative difference {rel:.2%}")  # fmt: skip


if __name__ == "__main__":
    main()
