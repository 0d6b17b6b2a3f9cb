"""Bytes back and driver reduce CPU seconds per layer of a sharded GPTQ run, two source trees side by side.

The same run (bench_qlooper_loop's random decoder: hidden 256, MLP 512, 2 layers; 272 rows x 256 tokens =
69,632 tokens, 2 whole Hessian segments of 32,768 rows and a tail per input; GPTQ 4-bit g128;
``LocalShardExecutor(2)``) under each source tree given (e.g. main and a branch), each in its own process.
"reduce" is the driver feeding the workers' results to the statistics (``LayerTimes.reduce``) measured as
process CPU seconds: the in-process workers run one after another, so nothing else runs in that window.

Run: ``[BENCH_ROWS=544] python benchmarks/bench_sharded_hessian_reduce.py NAME=/path/to/tree ...`` (a tree's
``packages/*/src`` go first on PYTHONPATH; default: this tree alone). Asserts nothing about time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROWS = int(os.environ.get("BENCH_ROWS", "272"))  # rows of 256 tokens (env BENCH_ROWS: another count)
LENGTH, BATCH, LAYERS = 256, 8, 2


def child() -> None:
    """One run under the trees on ``sys.path``; prints per-layer numbers as JSON."""
    sys.path.insert(0, str(HERE))
    import bench_qlooper_loop as toy
    import qlooper.executor as executor_module
    import torch
    from qalgos.spec import QuantSpec
    from qlooper import LoopOptions, prepare_calibration, quantize_model
    from qlooper.executor import LocalShardExecutor

    toy.LAYERS = LAYERS
    torch.set_num_threads(1)
    # the executor's own clock, as process CPU seconds (its reduce window has only the driver's work)
    executor_module.time = SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(1, toy.VOCAB, (LENGTH,), generator=g).tolist() for _ in range(ROWS)]
    cal = prepare_calibration(rows, batch_size=BATCH, max_length=LENGTH)
    executor = LocalShardExecutor(2)
    start = time.process_time()
    quantize_model(
        toy.Decoder(),
        toy.DEFINITION,
        cal,
        QuantSpec(bits=4, group_size=128),
        "gptq",
        options=LoopOptions(executor=executor),
    )
    layers = [
        {
            "layer": t.layer,
            "bytes_back": t.bytes_back,
            "bytes_sums": getattr(t, "bytes_sums", 0),
            "reduce_cpu_s": t.reduce,
            "worker_statistic_cpu_s": getattr(t, "statistic", 0.0),
            "forward_cpu_s": t.forward,
        }
        for t in executor.times
    ]
    print(json.dumps({"tokens": cal.total_tokens, "run_cpu_s": time.process_time() - start, "layers": layers}))


def run_tree(tree: Path) -> dict:
    paths = [str(p) for p in sorted((tree / "packages").glob("*/src"))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    trees = dict(arg.split("=", 1) for arg in sys.argv[1:]) or {"this": str(HERE.parent)}
    results = {name: run_tree(Path(tree)) for name, tree in trees.items()}
    print(f"{ROWS} x {LENGTH} tokens, {LAYERS} layers of hidden 256 / MLP 512, GPTQ 4-bit g128, 2 local shard workers")
    print("| tree | layer | MB back | of which sums | driver reduce CPU s | worker sums CPU s (slowest) | run CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, result in results.items():
        for t in result["layers"]:
            print(
                f"| {name} | {t['layer']} | {t['bytes_back'] / 1e6:.1f} | {t['bytes_sums'] / 1e6:.1f} | "
                f"{t['reduce_cpu_s']:.2f} | {t['worker_statistic_cpu_s']:.2f} | {result['run_cpu_s']:.1f} |"
            )


if __name__ == "__main__":
    child() if sys.argv[1:] == ["--child"] else main()
