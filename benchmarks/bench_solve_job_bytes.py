"""What a sharded GPTQ run sends its workers for the solves of one decoder layer, and in how many jobs.

A random Llama layer (transformers' init) of ``--shape`` (``smollm2``: SmolLM2-135M's hidden 576, MLP 1536,
9 / 3 heads; ``8b``: Llama-3-8B's 4096, 14336, 32 / 8), ``--rows`` x ``--length`` calibration tokens, GPTQ 4-bit
g64, under qlooper's in-process ``LocalShardExecutor(--workers)``. Every ``solve_map`` call is wrapped: its jobs,
and the tensor bytes of their arguments with a tensor counted once per worker that receives it (the same
object in several jobs is one object-store copy per worker; jobs go round-robin, waves of one per worker).
Works on any qlooper (run it with the older code on PYTHONPATH for "before"). Prints one JSON line.

    python benchmarks/bench_solve_job_bytes.py [--shape smollm2] [--workers 3] [--rows 16] [--length 128]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_llama import random_llama

SHAPES = {
    "smollm2": {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3},
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8},
}
VOCAB = 512


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    from qalgos.spec import QuantSpec
    from qlooper import LoopOptions, quantize_model
    from qlooper.executor import LocalShardExecutor, tensor_bytes

    model, definition, calibration = random_llama(SHAPES[args.shape], 1, VOCAB, args.rows, args.length, batch_size=2)
    executor = LocalShardExecutor(args.workers)
    calls: list[dict[str, Any]] = []
    solve_map = executor._solve_map

    def counted(fn: Any, jobs: Any) -> list[Any]:
        received: list[set[int]] = [set() for _ in range(args.workers)]
        sent = sum(tensor_bytes(job, received[i % args.workers]) for i, job in enumerate(jobs))
        calls.append({"jobs": len(jobs), "bytes": sent, "fn": getattr(fn, "__name__", str(fn))})
        return solve_map(fn, jobs)

    executor._solve_map = counted  # type: ignore[method-assign]  # the solve_map property returns it
    spec = QuantSpec(bits=4, group_size=64)
    quantize_model(model, definition, calibration, spec, "gptq", options=LoopOptions(executor=executor))
    print(
        json.dumps(
            {
                "shape": args.shape,
                "workers": args.workers,
                "tokens": args.rows * args.length,
                "solve_calls": [(c["fn"], c["jobs"]) for c in calls],
                "jobs": sum(c["jobs"] for c in calls),
                "mb_per_layer": round(sum(c["bytes"] for c in calls) / 2**20, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
