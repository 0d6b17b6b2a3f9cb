"""Where lowbit's AWQ spends one 8B-shaped layer: ``quantize`` under cProfile, the top functions printed.

Writes (or reuses) the first ``--layers`` decoder layers of ``benchmarks/scale_models.py``'s ``--shape`` as
float16 shards under ``--work``, loads them in ``--dtype`` and runs AWQ 4-bit g128 on ``--rows`` x ``--length``
seeded token ids, streaming as ``bench_scale`` does, with ``--threads`` torch threads. Prints the process CPU
and wall seconds of ``quantize`` and the ``--top`` functions by cumulative and by own time; ``--stats`` keeps
the raw profile. Nothing is asserted.

Run: ``OMP_NUM_THREADS=2 python benchmarks/profile_awq_scale.py --rows 8`` (minutes on a quiet 2-core CPU).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from scale_models import calibration_ids, shape, write_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama3-8b")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("bench-results/profile-awq"))
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--stats", type=Path, help="write the raw cProfile stats here")
    args = parser.parse_args()

    import qhf
    import torch

    torch.set_num_threads(args.threads)
    spec = shape(args.shape)
    model_dir = args.work / f"model-{spec.name}-{args.layers}"
    write_model(model_dir, spec.name, args.layers)
    rows = calibration_ids(int(spec.fields["vocab_size"]), args.rows, args.length)
    qm = qhf.load(model_dir, {"method": "awq", "bits": 4, "group_size": 128}, dtype=getattr(torch, args.dtype))
    profile = cProfile.Profile()
    cpu, wall = time.process_time(), time.perf_counter()
    profile.enable()
    qm.quantize(calibration=rows, keep_in_memory=False, spill_dir=args.work / "spill")
    profile.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"quantize: {cpu:.1f} CPU s, {wall:.1f} wall s ({args.layers} layers, {args.rows} x {args.length} rows)")
    stats = pstats.Stats(profile)
    if args.stats:
        stats.dump_stats(str(args.stats))
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
